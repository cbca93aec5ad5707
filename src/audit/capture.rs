//! A site's capture: the activations and the norm the audit reads, and
//! how the dropout reaches the norm ([`Form`]).

use serde::Serialize;

use super::shared;
use super::token::{EXACT_AUDIT_D, TokenValues, compound_token_values, token_values};
use crate::engine::Budget;
use crate::error::{Error, check_len};
use crate::formulas::shared_mask::MaskGroups;
use crate::ops::{AnyNorm, LayerNorm, Rate, RmsNorm};

/// How the dropout reaches the norm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Form {
    /// `norm(dropout(v))`.
    Plain,
    /// `norm(h + dropout(v))`.
    Bypass,
    /// `LN2(LN1(dropout(v)))`: LN1's output feeds LN2 directly.
    Compound,
}

impl Form {
    pub fn name(self) -> &'static str {
        match self {
            Form::Plain => "plain",
            Form::Bypass => "bypass",
            Form::Compound => "compound",
        }
    }
}

/// One site's capture: `tokens` rows of width `d`, row-major.
#[derive(Debug, Clone)]
pub struct SiteCapture {
    /// The site's name (the dropout's and the norm's module names).
    pub name: String,
    pub form: Form,
    pub p: f64,
    pub d: usize,
    /// `v`, `tokens × d`.
    pub v: Vec<f64>,
    /// `h`, `tokens × d` (ignored, and may be empty, for a plain site).
    pub h: Vec<f64>,
    /// The norm the dropout reaches (LN1 of a compound site).
    pub norm: AnyNorm,
    /// LN2 of a compound site (`None` otherwise).
    pub norm2: Option<LayerNorm>,
    /// The groups of channels that share one mask bit, when the mask is
    /// not elementwise (row/column or token-level dropout: `audit::shared`).
    pub mask_groups: Option<MaskGroups>,
    /// The model's own evaluation output (`tokens × d`), which replaces
    /// `norm(h + v)` as the eval column: on a corrected model it is what the
    /// model outputs.
    pub eval_output: Option<Vec<f64>>,
}

impl SiteCapture {
    /// Independent mask bits of a token: `d`, or the mask groups' count.
    pub fn mask_bits(&self) -> usize {
        self.mask_groups.as_ref().map_or(self.d, MaskGroups::count)
    }

    /// Whether a token's truth is enumerated over every mask (at most
    /// [`EXACT_AUDIT_D`] mask bits), so that no mask is drawn.
    pub fn truth_enumerated(&self) -> bool {
        self.mask_bits() <= EXACT_AUDIT_D
    }

    /// A plain or bypass capture from its parts; `layer` says LayerNorm
    /// (with `beta`) or RMSNorm. A compound capture is a plain LayerNorm one
    /// turned by [`SiteCapture::into_compound`].
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        name: String,
        form: Form,
        p: f64,
        d: usize,
        v: Vec<f64>,
        h: Vec<f64>,
        layer: bool,
        gamma: Vec<f64>,
        beta: Vec<f64>,
        eps: f64,
    ) -> Result<Self, Error> {
        Rate::new(p)?;
        if d == 0 || v.is_empty() || !v.len().is_multiple_of(d) {
            return Err(Error::InvalidOption {
                what: format!(
                    "site {name}: v holds {} values, not a whole number of rows of width {d}",
                    v.len()
                ),
            });
        }
        let h = match form {
            Form::Plain => vec![0.0; v.len()],
            Form::Bypass => {
                check_len("h", &h, v.len())?;
                h
            }
            Form::Compound => {
                return Err(Error::InvalidOption {
                    what: format!(
                        "site {name}: a compound capture is a plain one with a second \
                         LayerNorm (SiteCapture::into_compound)"
                    ),
                });
            }
        };
        let norm = if layer {
            AnyNorm::Layer(LayerNorm::new(gamma, beta, eps)?)
        } else {
            AnyNorm::Rms(RmsNorm::new(gamma, eps)?)
        };
        let width = norm.dim();
        if width != d {
            return Err(Error::InvalidOption {
                what: format!("site {name}: the norm has width {width}, the activations {d}"),
            });
        }
        Ok(SiteCapture {
            name,
            form,
            p,
            d,
            v,
            h,
            norm,
            norm2: None,
            mask_groups: None,
            eval_output: None,
        })
    }

    /// This plain or bypass site with its mask shared over groups of
    /// channels: channel `k`'s bit is group `ids[k]`'s (any labels; one
    /// label for every channel is a token-level mask).
    pub fn with_mask_groups(self, ids: &[usize]) -> Result<SiteCapture, Error> {
        if ids.len() != self.d || self.form == Form::Compound {
            return Err(Error::InvalidOption {
                what: format!(
                    "site {}: mask groups need one id per channel ({}, got {}) on a plain or \
                     bypass site",
                    self.name,
                    self.d,
                    ids.len()
                ),
            });
        }
        Ok(SiteCapture {
            mask_groups: Some(MaskGroups::new(ids)?),
            ..self
        })
    }

    /// This site with the model's own evaluation output (`tokens × d`,
    /// finite) as its eval column.
    pub fn with_eval_output(self, values: Vec<f64>) -> Result<SiteCapture, Error> {
        check_len("eval_output", &values, self.v.len())?;
        if values.iter().any(|a| !a.is_finite()) {
            return Err(Error::InvalidOption {
                what: format!("site {}: the eval output holds NaN or inf", self.name),
            });
        }
        Ok(SiteCapture {
            eval_output: Some(values),
            ..self
        })
    }

    /// How the mask is shared, for the table: `None` for elementwise.
    pub fn mask_sharing(&self) -> Option<String> {
        self.mask_groups.as_ref().map(|g| {
            if g.is_token() {
                "token (one draw for every channel)".to_string()
            } else {
                format!("{} groups of channels", g.count())
            }
        })
    }

    /// This plain LayerNorm site, its norm (LN1) feeding the LayerNorm
    /// `(gamma2, beta2, eps2)` (LN2) directly: the compound site
    /// `LN2(LN1(dropout(v)))`.
    pub fn into_compound(
        self,
        gamma2: Vec<f64>,
        beta2: Vec<f64>,
        eps2: f64,
    ) -> Result<SiteCapture, Error> {
        if self.form != Form::Plain
            || !matches!(self.norm, AnyNorm::Layer(_))
            || self.mask_groups.is_some()
        {
            return Err(Error::InvalidOption {
                what: format!(
                    "site {}: only a plain LayerNorm site (dropout → LN1) can feed a second \
                     LayerNorm as a compound site",
                    self.name
                ),
            });
        }
        let ln2 = LayerNorm::new(gamma2, beta2, eps2)?;
        if ln2.dim() != self.d {
            return Err(Error::InvalidOption {
                what: format!(
                    "site {}: LN2 has width {}, the activations {}",
                    self.name,
                    ln2.dim(),
                    self.d
                ),
            });
        }
        Ok(SiteCapture {
            form: Form::Compound,
            norm2: Some(ln2),
            ..self
        })
    }

    pub fn tokens(&self) -> usize {
        self.v.len() / self.d
    }

    pub fn norm_name(&self) -> &'static str {
        match (&self.norm, &self.norm2) {
            (AnyNorm::Layer(_), Some(_)) => "LN→LN",
            (norm, _) => norm.kind().name(),
        }
    }

    /// Token `t`'s values (`budget` for a sampled truth).
    pub(super) fn token(&self, t: usize, rate: Rate, budget: Budget) -> Result<TokenValues, Error> {
        let rows = t * self.d..(t + 1) * self.d;
        let mut values = self.model_free_token(rows.clone(), rate, budget)?;
        if let Some(eval) = &self.eval_output {
            values.eval = eval[rows].to_vec();
        }
        Ok(values)
    }

    /// Token values from the capture alone (`norm(h + v)` as eval).
    fn model_free_token(
        &self,
        rows: std::ops::Range<usize>,
        rate: Rate,
        budget: Budget,
    ) -> Result<TokenValues, Error> {
        if let Some(groups) = &self.mask_groups {
            return shared::token_values(
                &self.h[rows.clone()],
                &self.v[rows],
                groups,
                rate,
                &self.norm,
                budget,
            );
        }
        match (&self.norm, &self.norm2) {
            (AnyNorm::Layer(ln1), Some(ln2)) => {
                compound_token_values(&self.v[rows], rate, ln1, ln2, budget)
            }
            _ => token_values(
                &self.h[rows.clone()],
                &self.v[rows],
                rate,
                &self.norm,
                self.form == Form::Bypass,
                budget,
            ),
        }
    }
}
