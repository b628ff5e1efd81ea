//! Draws a plan like the paper's figures: engines across, time down,
//! colour = direction. Returns SVG text; writing it is the caller's job.

use crate::error::Result;
use crate::instance::Instance;
use crate::pattern::Pattern;
use crate::plan::Plan;
use std::fmt::Write;

fn colour(direction: &str) -> &'static str {
    match direction {
        "E" | "x+" => "#1f77b4",
        "W" | "x-" => "#aec7e8",
        "N" | "y+" => "#d62728",
        "S" | "y-" => "#ff9896",
        "NE" => "#2ca02c",
        "NW" => "#98df8a",
        "SE" => "#9467bd",
        "SW" => "#c5b0d5",
        _ => {
            const MORE: [&str; 6] = [
                "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#ff7f0e",
            ];
            MORE[direction.bytes().map(usize::from).sum::<usize>() % MORE.len()]
        }
    }
}

/// The plan as an SVG picture, with predicted times.
///
/// # Errors
///
/// The errors of [`Pattern::validate`](crate::Pattern::validate); [`SchedError::InvalidPlan`](crate::SchedError::InvalidPlan) when
/// `plan` does not cover `pattern`.
pub fn gantt_svg(pattern: &Pattern, plan: &Plan) -> Result<String> {
    let instance = Instance::new(pattern)?;
    plan.validate_coverage(&instance)?;
    let pieces = plan.pieces(&instance)?;
    let engines = instance.machine.engines;
    let end = plan
        .engines
        .iter()
        .flatten()
        .map(|c| c.end_us)
        .fold(1e-9, f64::max);
    let (column, height, left, top) = (90.0, 480.0, 60.0, 50.0);
    let scale = height / end;
    let width = left + column * engines as f64 + 20.0;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{}" font-family="sans-serif" font-size="11">"#,
        top + height + 40.0
    );
    let _ = writeln!(
        svg,
        r#"<text x="{left}" y="18" font-size="13">{}: predicted {:.1} us, simulated {:.1} us, bound {:.1} us</text>"#,
        xml_escape(&plan.algorithm),
        plan.makespan_us,
        plan.simulated_us,
        plan.lower_bound_us
    );
    for e in 0..engines {
        let x = left + column * e as f64;
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}">engine {e}</text>"#,
            x + 20.0,
            top - 8.0
        );
        let _ = writeln!(
            svg,
            r##"<rect x="{x}" y="{top}" width="{column}" height="{height}" fill="none" stroke="#ccc"/>"##
        );
    }
    for tick in 0..=4 {
        let t = end * tick as f64 / 4.0;
        let y = top + t * scale;
        let _ = writeln!(svg, r#"<text x="4" y="{:.1}">{t:.1} us</text>"#, y + 4.0);
    }
    for (e, piece, i) in pieces {
        let c = &plan.engines[e][i];
        let put = &instance.puts[piece.put];
        let (x, y) = (left + column * e as f64 + 4.0, top + c.start_us * scale);
        let h = ((c.end_us - c.start_us) * scale).max(1.0);
        let _ = writeln!(
            svg,
            r##"<rect x="{x:.1}" y="{y:.1}" width="{:.1}" height="{h:.1}" fill="{}" stroke="#333"><title>request {} {} {} B</title></rect>"##,
            column - 8.0,
            colour(&put.direction),
            put.id,
            xml_escape(&put.direction),
            piece.bytes
        );
        if h > 12.0 {
            let _ = writeln!(
                svg,
                r#"<text x="{:.1}" y="{:.1}">{} #{}</text>"#,
                x + 4.0,
                y + 12.0,
                xml_escape(&put.direction),
                put.id
            );
        }
    }
    svg.push_str("</svg>\n");
    Ok(svg)
}

/// Text as XML character data or an attribute value: names from input files
/// (an algorithm, a direction) cannot open elements in the picture.
fn xml_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}
