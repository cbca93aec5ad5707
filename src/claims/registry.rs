//! The crate's own families as the claims know them, in the report's order:
//! each one's name, one line on what it checks, its claims and whether they
//! exercise a dropout layer alone. [`crate::registry::Registry::default`]
//! makes its families of these (adding each one's `eval` quantity and
//! figures); the shorthands are what the tests read when they need every
//! claim. The table lives here, below the registry, so that the claims do
//! not depend on the registry that lists them.

use super::{
    Claim, attention, batchnorm, bypass, compound, dropout, ensemble, layernorm, linear_path,
    mask_shape, network, rmsnorm, second_order, semantics,
};

/// One of the crate's families, as its claims declare it.
pub struct CrateFamily {
    /// What `--family` selects and what each of its claims returns from
    /// [`Claim::family`].
    pub name: &'static str,
    /// One line on what the family checks (`dropmc list`).
    pub summary: &'static str,
    /// Its claims, in report order.
    pub claims: Vec<&'static dyn Claim>,
    /// Whether the claims exercise a dropout layer alone (the conformance
    /// kit runs exactly those on an implementation under test).
    pub dropout_alone: bool,
}

/// The crate's families, in the report's order.
pub fn families() -> Vec<CrateFamily> {
    let families = vec![
        CrateFamily {
            name: "dropout",
            summary: "inverted dropout's moments, kept count and survivors",
            claims: dropout::claims(),
            dropout_alone: true,
        },
        CrateFamily {
            name: "layernorm",
            summary: "LayerNorm after dropout: E[M], Var M, E[V], c(μ,σ), E[LN(z)]",
            claims: layernorm::claims(),
            dropout_alone: false,
        },
        CrateFamily {
            name: "rmsnorm",
            summary: "RMSNorm after dropout: E[R²] and the √q correction",
            claims: rmsnorm::claims(),
            dropout_alone: false,
        },
        CrateFamily {
            name: "bypass",
            summary: "dropout on a bypass branch before LayerNorm: the damped ρ² form",
            claims: bypass::claims(),
            dropout_alone: false,
        },
        CrateFamily {
            name: "compound",
            summary: "dropout → LN1 → LN2: the compound correction",
            claims: compound::claims(),
            dropout_alone: false,
        },
        CrateFamily {
            name: "semantics",
            summary: "train/eval semantics: eval identity, no eval draws, same mask in backward",
            claims: semantics::claims(),
            dropout_alone: true,
        },
        CrateFamily {
            name: "attention",
            summary: "attention dropout after softmax: E[b], the row sum R, E[o]",
            claims: attention::claims(),
            dropout_alone: true,
        },
        CrateFamily {
            name: "mask_shape",
            summary: "masks shared over positions versus independent per element",
            claims: mask_shape::claims(),
            dropout_alone: true,
        },
        CrateFamily {
            name: "ensemble",
            summary: "the ensemble gap of a convex function of the dropout output",
            claims: ensemble::claims(),
            dropout_alone: true,
        },
        CrateFamily {
            name: "batchnorm",
            summary: "BatchNorm running statistics after dropout and their zero-cost fold",
            claims: batchnorm::claims(),
            dropout_alone: false,
        },
        CrateFamily {
            name: "second_order",
            summary: "the next-order corrections for LayerNorm and RMSNorm",
            claims: second_order::claims(),
            dropout_alone: false,
        },
        CrateFamily {
            name: linear_path::FAMILY,
            summary: "a dropout reaching its norm through linear maps: Σ, E[V], E[R²], c",
            claims: linear_path::claims(),
            dropout_alone: false,
        },
        CrateFamily {
            name: network::FAMILY,
            summary: "the network noise ledger: every dropout upstream of a norm, through residual adds, norms, maps",
            claims: network::claims(),
            dropout_alone: false,
        },
    ];
    // The in-crate example family's one registry line (docs/architecture.md).
    #[cfg(feature = "example-family")]
    let families: Vec<CrateFamily> = families
        .into_iter()
        .chain([CrateFamily {
            name: super::example::FAMILY,
            summary: "the in-crate example: adjacent products of dropped-out units",
            claims: super::example::claims(),
            dropout_alone: true,
        }])
        .collect();
    families
}

/// Every claim of the crate's families, family by family (the default
/// registry's claims).
pub fn registry() -> Vec<&'static dyn Claim> {
    families().into_iter().flat_map(|f| f.claims).collect()
}

/// The crate's family names, in order.
pub fn family_names() -> Vec<&'static str> {
    families().into_iter().map(|f| f.name).collect()
}
