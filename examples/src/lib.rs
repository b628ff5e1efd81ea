//! Examples of sode; see `examples/`.

/// A process grid for `n` ranks over `dims` axes, as square as possible:
/// `n`'s prime factors, largest first, each multiplying the axis with the
/// fewest processes so far (the fastest axis first among equals). Empty
/// for no axis.
pub fn process_grid(n: usize, dims: usize) -> Vec<usize> {
    let mut grid = vec![1; dims];
    let mut rest = n;
    let mut f = 2;
    let mut factors = Vec::new();
    while rest > 1 {
        while rest % f == 0 {
            factors.push(f);
            rest /= f;
        }
        f += 1;
    }
    for &p in factors.iter().rev() {
        if let Some(a) = (0..dims).min_by_key(|&a| grid[a]) {
            grid[a] *= p;
        }
    }
    grid
}

#[cfg(test)]
mod tests {
    #[test]
    fn grids_are_as_square_as_the_factors_allow() {
        assert_eq!(super::process_grid(4, 2), vec![2, 2]);
        assert_eq!(super::process_grid(8, 3), vec![2, 2, 2]);
        assert_eq!(super::process_grid(6, 2), vec![3, 2]);
        assert_eq!(super::process_grid(7, 2), vec![7, 1]);
        assert_eq!(super::process_grid(1, 3), vec![1, 1, 1]);
    }
}
