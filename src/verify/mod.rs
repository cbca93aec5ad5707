//! Verifying the verifier: does the suite fail at the rate it states, and
//! are its p-values uniform when the implementation is correct?

pub mod calibrate;
pub mod perturb;
pub mod power;
pub mod size;
