//! The open registry: every family of claims, with what each one adds to the
//! outputs, held as one value that every output reads.
//!
//! A [`Family`] declares in one place
//!
//! * its claims (what the report, `dropmc list`, the JSON, the conformance
//!   kit, calibration, the power tables, the budget test and the snapshot
//!   run),
//! * whether those claims exercise a dropout layer alone (the conformance
//!   kit runs exactly those families on an implementation under test),
//! * its `eval` quantities (what `dropmc eval <name>` and the bindings'
//!   `eval` run on the user's own numbers: arguments, closed forms, exact
//!   values and estimators),
//! * its figures (what `dropmc plot` draws).
//!
//! [`Registry::default`] holds the crate's own families in a fixed order;
//! [`Registry::with_family`] adds one from outside the crate, and the report,
//! the JSON and the CLI (`cli::main_with_registry`) then pick it up without
//! an edit inside `src/`. `examples/new_formula.rs` does this end to end.
//!
//! ```
//! use dropmc::Registry;
//!
//! let registry = Registry::default();
//! let layernorm = registry.family("layernorm").unwrap();
//! assert!(layernorm.claims().iter().all(|c| c.family() == "layernorm"));
//! assert!(registry.family("no_such_family").is_err());
//! ```

use std::fmt;

use crate::claims::{self, Claim};
use crate::error::Error;
use crate::eval::{self, EvalQuantity};
use crate::plot::{self, Figure};

/// One family: a name, its claims and what it adds to the outputs.
///
/// Adding a family from outside the crate — here a claim that inverted
/// dropout keeps `E[z] = x`, written from plain functions:
///
/// ```
/// use dropmc::claims::{Card, Shape};
/// use dropmc::claims::fn_claim::{FnClaim, sample_means};
/// use dropmc::ops::{Subject, TrainPass};
/// use dropmc::{Family, Registry};
/// use dropmc::conformance::report::{self, Options};
///
/// const X: [f64; 3] = [1.0, -2.0, 0.5];
/// static MEAN: FnClaim = FnClaim {
///     card: Card::new("mine.mean", "mine", "E[z] = x", Shape::Vector, 50_000),
///     analytic: || Ok(X.to_vec()),
///     oracle: None,
///     estimate: |subject, budget| {
///         sample_means(subject, budget, X.len(), |s, rng, out| {
///             let mut mask = [false; 3];
///             s.dropout.forward_train(TrainPass::new(&X, out, &mut mask), 0.25, rng)
///         })
///     },
///     fast: None,
///     law: None,
/// };
///
/// let registry = Registry::default()
///     .with_family(Family::new("mine", "my dropout claim").with_claim(&MEAN));
/// let options = Options { family: Some("mine".into()), ..Options::default() };
/// let run = report::run(&registry, &Subject::reference(), &options).unwrap();
/// assert_eq!(run.results[0].id, "mine.mean");
/// assert!(run.passed());
/// ```
#[derive(Clone)]
pub struct Family {
    name: &'static str,
    summary: &'static str,
    claims: Vec<&'static dyn Claim>,
    dropout_alone: bool,
    quantities: Vec<EvalQuantity>,
    figures: Vec<Figure>,
}

impl Family {
    /// An empty family; `name` is what `--family` selects and what each of
    /// its claims returns from [`Claim::family`].
    pub fn new(name: &'static str, summary: &'static str) -> Self {
        Family {
            name,
            summary,
            claims: Vec::new(),
            dropout_alone: false,
            quantities: Vec::new(),
            figures: Vec::new(),
        }
    }

    /// Adds every claim of a static list, in order.
    pub fn with_claims<C: Claim + 'static>(mut self, claims: &'static [C]) -> Self {
        self.claims
            .extend(claims.iter().map(|c| c as &'static dyn Claim));
        self
    }

    /// Adds every claim of a list, in order.
    pub fn with_claim_list(mut self, claims: Vec<&'static dyn Claim>) -> Self {
        self.claims.extend(claims);
        self
    }

    /// Adds one claim.
    pub fn with_claim(mut self, claim: &'static dyn Claim) -> Self {
        self.claims.push(claim);
        self
    }

    /// Marks the family's claims as exercising a dropout layer alone, so
    /// that the conformance kit runs them on an implementation under test.
    pub fn exercising_dropout_alone(mut self) -> Self {
        self.dropout_alone = true;
        self
    }

    /// Adds an `eval` quantity.
    pub fn with_quantity(mut self, quantity: EvalQuantity) -> Self {
        self.quantities.push(quantity);
        self
    }

    /// Adds a figure.
    pub fn with_figure(mut self, figure: Figure) -> Self {
        self.figures.push(figure);
        self
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    pub fn summary(&self) -> &'static str {
        self.summary
    }

    pub fn claims(&self) -> &[&'static dyn Claim] {
        &self.claims
    }

    /// True when the conformance kit runs this family on a dropout layer.
    pub fn exercises_dropout_alone(&self) -> bool {
        self.dropout_alone
    }

    pub fn quantities(&self) -> &[EvalQuantity] {
        &self.quantities
    }

    pub fn figures(&self) -> &[Figure] {
        &self.figures
    }
}

impl fmt::Debug for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Family")
            .field("name", &self.name)
            .field(
                "claims",
                &self.claims.iter().map(|c| c.id()).collect::<Vec<_>>(),
            )
            .field("dropout_alone", &self.dropout_alone)
            .field(
                "quantities",
                &self.quantities.iter().map(|q| q.name()).collect::<Vec<_>>(),
            )
            .field("figures", &self.figures)
            .finish()
    }
}

/// The families every output reads, in order.
#[derive(Clone, Debug)]
pub struct Registry {
    families: Vec<Family>,
}

impl Default for Registry {
    /// The crate's own families ([`claims::families`]), in the order the
    /// report lists them, each with its `eval` quantity and its figures.
    fn default() -> Self {
        let mut registry = Registry::empty();
        for listed in claims::families() {
            let mut family =
                Family::new(listed.name, listed.summary).with_claim_list(listed.claims);
            if listed.dropout_alone {
                family = family.exercising_dropout_alone();
            }
            // The quantity by its constructor, not its name: a misspelt
            // quantity does not compile.
            type Quantity = Option<fn() -> EvalQuantity>;
            let (quantity, figures): (Quantity, &[Figure]) = match listed.name {
                "dropout" => (Some(eval::moments::quantity), &[]),
                "layernorm" => (
                    Some(eval::ln::quantity),
                    &[plot::LEADING_ORDER_GAP, plot::LAYERNORM_C],
                ),
                "rmsnorm" => (Some(eval::rms::quantity), &[]),
                "bypass" => (Some(eval::bypass::quantity), &[]),
                "compound" => (Some(eval::compound::quantity), &[]),
                "attention" => (Some(eval::attn::quantity), &[plot::ATTENTION_ROW_SUM]),
                "batchnorm" => (Some(eval::bn::quantity), &[plot::DEEP_STACK]),
                "linear_path" => (Some(eval::linear_path::quantity), &[]),
                _ => (None, &[]),
            };
            if let Some(quantity) = quantity {
                family = family.with_quantity(quantity());
            }
            for figure in figures {
                family = family.with_figure(*figure);
            }
            registry = registry.with_family(family);
        }
        registry
    }
}

impl Registry {
    /// A registry with no family.
    pub fn empty() -> Self {
        Registry {
            families: Vec::new(),
        }
    }

    /// Adds `family` after the others; a family of the same name is
    /// replaced in place (so an extension can override a crate family).
    pub fn with_family(mut self, family: Family) -> Self {
        match self.families.iter_mut().find(|f| f.name == family.name) {
            Some(slot) => *slot = family,
            None => self.families.push(family),
        }
        self
    }

    pub fn families(&self) -> &[Family] {
        &self.families
    }

    /// The family called `name`, or [`Error::UnknownFamily`] naming the
    /// known ones.
    pub fn family(&self, name: &str) -> Result<&Family, Error> {
        self.families
            .iter()
            .find(|f| f.name == name)
            .ok_or_else(|| Error::UnknownFamily {
                name: name.to_string(),
                known: self.family_names().join(", "),
            })
    }

    /// The family names in order.
    pub fn family_names(&self) -> Vec<&'static str> {
        self.families.iter().map(|f| f.name).collect()
    }

    /// Every claim, family by family.
    pub fn claims(&self) -> Vec<&'static dyn Claim> {
        self.families
            .iter()
            .flat_map(|f| f.claims.iter().copied())
            .collect()
    }

    /// The claims of one family (`Some`) or of all (`None`).
    pub fn select(&self, family: Option<&str>) -> Result<Vec<&'static dyn Claim>, Error> {
        match family {
            Some(name) => Ok(self.family(name)?.claims.clone()),
            None => Ok(self.claims()),
        }
    }

    /// The claim with this id, or [`Error::UnknownClaim`].
    pub fn claim(&self, id: &str) -> Result<&'static dyn Claim, Error> {
        self.claims()
            .into_iter()
            .find(|c| c.id() == id)
            .ok_or_else(|| Error::UnknownClaim {
                name: id.to_string(),
                known: self
                    .claims()
                    .iter()
                    .map(|c| c.id())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// Every `eval` quantity, family by family.
    pub fn quantities(&self) -> Vec<&EvalQuantity> {
        self.families.iter().flat_map(|f| &f.quantities).collect()
    }

    /// The `eval` quantity called `name`, or [`Error::UnknownQuantity`].
    pub fn quantity(&self, name: &str) -> Result<&EvalQuantity, Error> {
        let all = self.quantities();
        all.iter()
            .find(|q| q.name() == name)
            .copied()
            .ok_or_else(|| Error::UnknownQuantity {
                name: name.to_string(),
                near: self.quantity_one_edit_from(name).map(str::to_string),
                known: all.iter().map(|q| q.name()).collect::<Vec<_>>().join(", "),
            })
    }

    /// The quantity one edit away from `typed` (`lm` → `ln`): the
    /// suggestion for a mistyped name, which a similarity ratio misses on
    /// two-letter names.
    pub fn quantity_one_edit_from(&self, typed: &str) -> Option<&'static str> {
        self.quantities()
            .iter()
            .map(|q| q.name())
            .find(|name| one_edit_apart(typed, name))
    }

    /// Every figure, family by family.
    pub fn figures(&self) -> Vec<Figure> {
        self.families
            .iter()
            .flat_map(|f| f.figures.iter().copied())
            .collect()
    }

    /// The figure written to `file`, or [`Error::UnknownFigure`].
    pub fn figure(&self, file: &str) -> Result<Figure, Error> {
        let all = self.figures();
        all.iter()
            .find(|f| f.file == file)
            .copied()
            .ok_or_else(|| Error::UnknownFigure {
                name: file.to_string(),
                known: all.iter().map(|f| f.file).collect::<Vec<_>>().join(", "),
            })
    }
}

/// Whether `a` becomes `b` by one substitution, insertion or deletion.
fn one_edit_apart(a: &str, b: &str) -> bool {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let (short, long) = if a.len() <= b.len() {
        (&a, &b)
    } else {
        (&b, &a)
    };
    if long.len() - short.len() > 1 || a == b {
        return false;
    }
    let prefix = short
        .iter()
        .zip(long.iter())
        .take_while(|(x, y)| x == y)
        .count();
    let skip = usize::from(short.len() == long.len());
    short[prefix + skip..] == long[prefix + 1..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_claim_names_the_family_that_holds_it() {
        for family in Registry::default().families() {
            for claim in family.claims() {
                assert_eq!(claim.family(), family.name(), "{}", claim.id());
            }
        }
    }

    /// Whether `doc` names `id` as a whole word (not inside a longer id).
    fn names(doc: &str, id: &str) -> bool {
        let part_of_id = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '.';
        doc.match_indices(id).any(|(at, _)| {
            let before = doc[..at].chars().next_back();
            let after = doc[at + id.len()..].chars().next();
            !before.is_some_and(part_of_id)
                && !after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
        })
    }

    #[test]
    fn every_claim_id_is_in_the_formulas_doc() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/formulas.md");
        let doc = std::fs::read_to_string(path).expect("docs/formulas.md is readable");
        let doc = doc.as_str();
        let missing: Vec<_> = Registry::default()
            .claims()
            .iter()
            .map(|c| c.id())
            .filter(|id| !names(doc, id))
            .collect();
        assert!(
            missing.is_empty(),
            "docs/formulas.md does not list {missing:?}"
        );
    }

    #[test]
    fn claim_ids_are_unique() {
        let claims = Registry::default().claims();
        let mut ids: Vec<_> = claims.iter().map(|c| c.id()).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), claims.len());
    }

    #[test]
    fn every_claim_is_conclusive_at_its_default_budget() {
        for claim in Registry::default().claims() {
            assert!(
                claim.default_samples() >= claim.min_samples(),
                "{}: default {} draws is below its minimum budget {}",
                claim.id(),
                claim.default_samples(),
                claim.min_samples()
            );
        }
    }

    #[test]
    fn every_eval_quantity_of_the_crate_belongs_to_one_family() {
        let registry = Registry::default();
        let registered: Vec<_> = registry.quantities().iter().map(|q| q.name()).collect();
        let mut crate_quantities: Vec<_> = eval::quantities().iter().map(|q| q.name()).collect();
        assert_eq!(registered.len(), crate_quantities.len(), "{registered:?}");
        crate_quantities.retain(|name| !registered.contains(name));
        assert!(
            crate_quantities.is_empty(),
            "unregistered: {crate_quantities:?}"
        );
        assert!(matches!(
            registry.quantity("nope"),
            Err(Error::UnknownQuantity { .. })
        ));
    }

    #[test]
    fn a_quantity_one_edit_off_is_suggested_and_a_far_one_is_not() {
        let registry = Registry::default();
        let e = registry.quantity("lm").err().map(|e| e.to_string());
        assert!(
            e.as_deref()
                .is_some_and(|e| e.contains("did you mean \"ln\"?")),
            "{e:?}"
        );
        let e = registry.quantity("zzzz").err().map(|e| e.to_string());
        assert!(
            e.as_deref().is_some_and(|e| !e.contains("did you mean")),
            "{e:?}"
        );
        assert!(one_edit_apart("rm", "rms") && one_edit_apart("lnn", "ln"));
        assert!(!one_edit_apart("ln", "ln") && !one_edit_apart("x", "rms"));
    }

    #[test]
    fn a_family_of_the_same_name_replaces_the_old_one() {
        let before = Registry::default();
        let after = before
            .clone()
            .with_family(Family::new("layernorm", "emptied"));
        assert_eq!(after.family_names(), before.family_names());
        assert!(after.family("layernorm").unwrap().claims().is_empty());
        assert!(after.claims().len() < before.claims().len());
    }

    #[test]
    fn unknown_names_are_typed_errors_listing_the_known_ones() {
        let r = Registry::default();
        match r.family("nope") {
            Err(Error::UnknownFamily { known, .. }) => assert!(known.contains("layernorm")),
            other => panic!("{other:?}"),
        }
        assert!(matches!(r.claim("nope"), Err(Error::UnknownClaim { .. })));
        assert!(matches!(r.figure("nope"), Err(Error::UnknownFigure { .. })));
    }
}
