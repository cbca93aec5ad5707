//! Figures: the cheap ones are drawn in the default suite (the Monte Carlo
//! ones run with `dropmc plot`); each SVG carries its title and axis labels.

use dropmc::{Error, Registry};

#[test]
fn cheap_figures_are_written_with_labels() {
    let registry = Registry::default();
    let dir = std::env::temp_dir().join(format!("dropmc-plot-test-{}", std::process::id()));
    for (name, must_contain) in [
        ("attention_row_sum.svg", ["row sum R", "P(R = 1) = 0.25"]),
        ("leading_order_gap.svg", ["width d", "fitted slope"]),
    ] {
        let figure = registry.figure(name).expect("registered");
        std::fs::create_dir_all(&dir).expect("creates the directory");
        let path = dir.join(figure.file);
        (figure.draw)(&path).expect("draws");
        let svg = std::fs::read_to_string(&path).expect("reads");
        for text in must_contain {
            assert!(svg.contains(text), "{name} lacks {text:?}");
        }
    }
    assert!(matches!(
        registry.figure("nope.svg"),
        Err(Error::UnknownFigure { .. })
    ));
    // The README shows four figures; every one is registered.
    let mut files: Vec<_> = registry.figures().iter().map(|f| f.file).collect();
    files.sort_unstable();
    assert_eq!(
        files,
        [
            "attention_row_sum.svg",
            "deep_stack.svg",
            "layernorm_c.svg",
            "leading_order_gap.svg"
        ]
    );
    std::fs::remove_dir_all(&dir).ok();
}
