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
    // The figures docs/cli.md shows (its copies in docs/figures/) are the
    // registered ones, no more and no fewer.
    let mut files: Vec<_> = registry.figures().iter().map(|f| f.file).collect();
    files.sort_unstable();
    let cli = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/cli.md"))
        .expect("docs/cli.md is readable");
    let mut shown: Vec<&str> = cli
        .split("](figures/")
        .skip(1)
        .filter_map(|rest| rest.split(')').next())
        .collect();
    shown.sort_unstable();
    assert!(!shown.is_empty());
    assert_eq!(files, shown);
    std::fs::remove_dir_all(&dir).ok();
}
