//! The experiment's shape: network size, batches, inputs.

use serde::Serialize;

use crate::error::Error;

/// The experiment's shape.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct StackConfig {
    /// Channels per layer `W`.
    pub width: usize,
    /// Blocks `L`.
    pub depth: usize,
    /// Examples per train-mode batch.
    pub batch: usize,
    /// Train-mode batches run to set the BatchNorm buffers (the buffer
    /// refresh, `network::refresh_buffers`); the second half of
    /// them is the train-mode measurement. The name is the JSON key.
    pub refresh_batches: u32,
    /// Fresh inputs of an eval-mode measurement.
    pub eval_examples: usize,
    /// Mean of every input channel (variance 1).
    pub input_mean: f64,
    /// BatchNorm's and LayerNorm's `ε`.
    pub eps: f64,
}

impl Default for StackConfig {
    fn default() -> Self {
        StackConfig {
            width: 16,
            depth: 6,
            batch: 128,
            refresh_batches: 60,
            eval_examples: 1024,
            input_mean: 0.5,
            eps: 1e-5,
        }
    }
}

impl StackConfig {
    /// Rejects an empty, too large or degenerate configuration.
    pub(super) fn validate(&self) -> Result<(), Error> {
        if self.width == 0 || self.depth == 0 {
            return Err(Error::Empty {
                what: "stack width/depth",
            });
        }
        if self.depth > 64 {
            return Err(Error::TooLarge {
                what: "stack depth",
                limit: 64,
                got: self.depth,
            });
        }
        if self.width > 1024 {
            return Err(Error::TooLarge {
                what: "stack width",
                limit: 1024,
                got: self.width,
            });
        }
        if self.batch < 2 || self.eval_examples < 2 || self.refresh_batches < 2 {
            return Err(Error::InvalidOption {
                what: "the stack needs batch, eval_examples and refresh_batches >= 2".into(),
            });
        }
        if !(self.input_mean.is_finite() && self.eps.is_finite() && self.eps >= 0.0) {
            return Err(Error::InvalidOption {
                what: "input_mean and eps must be finite, eps >= 0".into(),
            });
        }
        Ok(())
    }
}
