//! Figures: the cheap ones are drawn in the default suite (the Monte Carlo
//! ones run with `dropmc plot`); each SVG carries its title and axis labels.

use dropmc::plot::{FIGURES, write_figure};

#[test]
fn cheap_figures_are_written_with_labels() {
    let dir = std::env::temp_dir().join(format!("dropmc-plot-test-{}", std::process::id()));
    for (name, must_contain) in [
        ("attention_row_sum.svg", ["row sum R", "P(R = 1) = 0.25"]),
        ("leading_order_gap.svg", ["width d", "fitted slope"]),
    ] {
        let path = write_figure(name, &dir).expect("draws");
        let svg = std::fs::read_to_string(&path).expect("reads");
        for text in must_contain {
            assert!(svg.contains(text), "{name} lacks {text:?}");
        }
    }
    assert!(write_figure("nope.svg", &dir).is_err());
    assert_eq!(FIGURES.len(), 4);
    std::fs::remove_dir_all(&dir).ok();
}
