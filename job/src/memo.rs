//! Values worked out once per job and kept for everything built on it:
//! measurements (shared-memory thresholds, the RDMA model) that every
//! exchange on a [`World`](crate::World) would otherwise take again.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// One value per type, made on first use. Shared by a world's clones and
/// renumberings, so keep in it only what does not depend on rank numbers.
#[derive(Default)]
pub(crate) struct Memo {
    values: Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
}

impl std::fmt::Debug for Memo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kept = self
            .values
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len();
        f.debug_struct("Memo").field("kept", &kept).finish()
    }
}

impl Memo {
    /// The value of type `T`, made by `init` if there is none yet (under
    /// the lock: keep `init` cheap, an empty cache rather than a
    /// measurement).
    pub(crate) fn get_or_init<T: Any + Send + Sync>(&self, init: impl FnOnce() -> T) -> Arc<T> {
        // Only inserted into: a panic elsewhere leaves the map whole.
        let mut values = self.values.lock().unwrap_or_else(PoisonError::into_inner);
        let key = TypeId::of::<T>();
        // Keyed by the type itself, so the downcast finds what was kept.
        if let Some(kept) = values
            .get(&key)
            .and_then(|v| Arc::clone(v).downcast::<T>().ok())
        {
            return kept;
        }
        let made = Arc::new(init());
        values.insert(key, made.clone());
        made
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_value_per_type_made_once() {
        let memo = Memo::default();
        let a = memo.get_or_init(|| Mutex::new(1u32));
        *a.lock().unwrap() += 1;
        let b = memo.get_or_init(|| Mutex::new(7u32));
        assert_eq!(
            *b.lock().unwrap(),
            2,
            "the second call must see the first value"
        );
        let s = memo.get_or_init(|| String::from("x"));
        assert_eq!(s.as_str(), "x");
        assert_eq!(*memo.get_or_init(|| Mutex::new(9u32)).lock().unwrap(), 2);
    }
}
