//! Reading an audit capture from an `.npz` file, the layout
//! `dropmc.audit`'s `Audit.save` / `save_captures` writes (docs/audit.md),
//! so `dropmc audit --activations FILE` audits a capture without Python.
//!
//! # The container
//!
//! An `.npz` is a zip archive with one member `NAME.npy` per array;
//! `np.savez` stores them uncompressed (and marks every member zip64). The
//! archive is read with the `zip` crate (its default features off: stored
//! members only, no compression libraries); a file from `np.savez_compressed`
//! is refused with that reason.
//!
//! # One `.npy` member
//!
//! Step by step (NEP 1, the `.npy` format):
//!
//! 1. the magic `\x93NUMPY`, a major and a minor version byte;
//! 2. the header's length: a little-endian `u16` in version 1, a `u32` in
//!    versions 2 and 3;
//! 3. the header, a Python dict literal such as
//!    `{'descr': '<f8', 'fortran_order': False, 'shape': (64, 512), }`;
//! 4. the data: `∏ shape` items of `descr`, in C order unless
//!    `fortran_order` is true.
//!
//! The capture needs three item types: `<f8` (and `<f4`, widened exactly)
//! for the numbers, `<i8`/`<i4` for the counts, `|u1` for the strings.
//!
//! # The layout (version 2)
//!
//! `version`, `count` (integer scalars) and per site `i < count`:
//! `site{i}_name`, `site{i}_form` (`plain`/`bypass`/`compound`),
//! `site{i}_norm` (`layer`/`rms`) as UTF-8 bytes; `site{i}_p`, `site{i}_eps`
//! scalars; `site{i}_v`, `site{i}_h` (`tokens × d`); `site{i}_gamma`,
//! `site{i}_beta` (`d`); a compound site also LN2's `site{i}_gamma2`,
//! `site{i}_beta2` (`d`) and `site{i}_eps2` (scalar); `attention_count` and
//! per attention site the arrays below. Version 1 (before compound and attention sites) is
//! refused with a message to re-save the capture.
//!
//! # Attention sites
//!
//! `count` may be 0 when `attention_count` is not. Per attention site `i`: `attention{i}_name` (UTF-8 bytes), `attention{i}_p`
//! (scalar), `attention{i}_weights` (`batch × heads × queries × keys`),
//! `attention{i}_values` (`batch × heads × keys × head_dim`),
//! `attention{i}_out_weight` (`embed × heads·head_dim`),
//! `attention{i}_out_bias` (`embed`).

use std::io::Read;

mod npy;

pub use npy::npy_member;
use npy::{Array, Values, parse_npy};

use super::{AttentionCapture, Form, SiteCapture};
use crate::error::Error;

/// The layout version this reader understands.
pub const LAYOUT_VERSION: i64 = 2;

/// An error about the array `name` of the archive at `path`.
fn member_error(path: &str, name: &str, message: impl std::fmt::Display) -> Error {
    Error::Io {
        path: path.to_string(),
        message: format!("array {name}: {message}"),
    }
}

/// The archive's arrays, read on demand.
struct Archive {
    path: String,
    zip: zip::ZipArchive<std::fs::File>,
}

impl Archive {
    fn open(path: &str) -> Result<Archive, Error> {
        let io = |message: String| Error::Io {
            path: path.to_string(),
            message,
        };
        let file = std::fs::File::open(path).map_err(|e| io(format!("cannot open: {e}")))?;
        let zip = zip::ZipArchive::new(file).map_err(|e| {
            io(format!(
                "not an .npz (a zip archive as np.savez writes): {e}"
            ))
        })?;
        Ok(Archive {
            path: path.to_string(),
            zip,
        })
    }

    fn error(&self, name: &str, message: impl std::fmt::Display) -> Error {
        member_error(&self.path, name, message)
    }

    fn array(&mut self, name: &str) -> Result<Array, Error> {
        let path = self.path.clone();
        let error = |message: String| member_error(&path, name, message);
        // np.savez_compressed deflates its members, which this reader (the
        // zip crate without compression features) does not inflate.
        let unreadable = |e: &dyn std::fmt::Display| {
            let text = e.to_string();
            if text.to_lowercase().contains("compression") {
                error(format!(
                    "{text} (dropmc reads np.savez's uncompressed archives, not np.savez_compressed's)"
                ))
            } else {
                error(text)
            }
        };
        let member = format!("{name}.npy");
        let mut bytes = Vec::new();
        match self.zip.by_name(&member) {
            Ok(mut file) => file.read_to_end(&mut bytes).map_err(|e| unreadable(&e))?,
            Err(zip::result::ZipError::FileNotFound) => {
                return Err(error(
                    "missing (written by dropmc.audit's Audit.save / save_captures?)".into(),
                ));
            }
            Err(e) => return Err(unreadable(&e)),
        };
        parse_npy(&bytes).map_err(error)
    }

    /// A float array of `dims` dimensions, every value finite (the first
    /// NaN or infinity is named with its index).
    fn float_array(&mut self, name: &str, dims: usize) -> Result<(Vec<usize>, Vec<f64>), Error> {
        let a = self.array(name)?;
        match a.values {
            Values::Float(v) if a.shape.len() == dims => {
                match v.iter().position(|x| !x.is_finite()) {
                    Some(at) => Err(self.error(
                        name,
                        format!(
                            "holds {} at index {:?} of shape {:?}: a capture must be finite",
                            v[at],
                            unravel(at, &a.shape),
                            a.shape
                        ),
                    )),
                    None => Ok((a.shape, v)),
                }
            }
            Values::Float(_) => Err(self.error(
                name,
                format!("has shape {:?}, expected {dims} dimensions", a.shape),
            )),
            _ => Err(self.error(name, "is not a float64 array")),
        }
    }

    /// An optional 1-D int64 member (`None` when the archive lacks it).
    fn optional_ints(&mut self, name: &str) -> Result<Option<Vec<i64>>, Error> {
        if self.zip.index_for_name(&format!("{name}.npy")).is_none() {
            return Ok(None);
        }
        let a = self.array(name)?;
        match a.values {
            Values::Int(v) if a.shape.len() == 1 => Ok(Some(v)),
            _ => Err(self.error(name, "is not a 1-D integer array")),
        }
    }

    fn scalar(&mut self, name: &str) -> Result<f64, Error> {
        let (_, v) = self.float_array(name, 0)?;
        Ok(v[0])
    }

    fn integer(&mut self, name: &str) -> Result<i64, Error> {
        let a = self.array(name)?;
        match a.values {
            Values::Int(v) if a.shape.is_empty() => Ok(v[0]),
            _ => Err(self.error(name, "is not an integer scalar")),
        }
    }

    /// The value whose word the text member `name` holds, among `options`
    /// (word, value); any other word is an error naming the member and the
    /// words it may hold (`"a", "b" or "c"`).
    fn choice<T: Copy>(&mut self, name: &str, options: &[(&str, T)]) -> Result<T, Error> {
        let text = self.text(name)?;
        if let Some((_, value)) = options.iter().find(|(word, _)| *word == text) {
            return Ok(*value);
        }
        let words: Vec<String> = options.iter().map(|(w, _)| format!("{w:?}")).collect();
        let expected = match words.split_last() {
            Some((last, [])) => last.clone(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => String::new(),
        };
        Err(self.error(name, format!("{text:?}, expected {expected}")))
    }

    fn text(&mut self, name: &str) -> Result<String, Error> {
        let a = self.array(name)?;
        match a.values {
            Values::Bytes(b) if a.shape.len() == 1 => {
                String::from_utf8(b).map_err(|_| self.error(name, "is not UTF-8 text"))
            }
            _ => Err(self.error(name, "is not a uint8 string")),
        }
    }
}

/// The multi-index of the flat C-order index `at` in `shape`.
fn unravel(mut at: usize, shape: &[usize]) -> Vec<usize> {
    let mut index = vec![0; shape.len()];
    for (i, &size) in shape.iter().enumerate().rev() {
        index[i] = at % size.max(1);
        at /= size.max(1);
    }
    index
}

/// `error` (about an array of site `i`) with the site's own name added.
fn at_site(error: Error, name: &str) -> Error {
    match error {
        Error::Io { path, message } => Error::Io {
            path,
            message: format!("{message} (site {name:?})"),
        },
        other => other,
    }
}

/// A capture file's sites: the norm sites and the attention sites.
#[derive(Debug, Clone)]
pub struct Captures {
    pub sites: Vec<SiteCapture>,
    pub attention: Vec<AttentionCapture>,
}

/// The captures of the `.npz` at `path` (module docs: the layout).
pub fn read_captures(path: &str) -> Result<Captures, Error> {
    let mut archive = Archive::open(path)?;
    let version = archive.integer("version")?;
    if version != LAYOUT_VERSION {
        let hint = if version < LAYOUT_VERSION {
            " (an older dropmc's capture: re-save it with this dropmc's Audit.save)"
        } else {
            " (a newer dropmc's capture: upgrade dropmc)"
        };
        return Err(archive.error(
            "version",
            format!("layout version {version}; this dropmc reads version {LAYOUT_VERSION}{hint}"),
        ));
    }
    let count = archive.integer("count")?;
    let attention_count = archive.integer("attention_count")?;
    if count < 0 || attention_count < 0 || count + attention_count < 1 {
        return Err(archive.error(
            "count",
            format!("{count} sites and {attention_count} attention sites: nothing to audit"),
        ));
    }
    let sites = norm_sites(&mut archive, count)?;
    let attention = (0..attention_count)
        .map(|i| attention_site(&mut archive, i))
        .collect::<Result<_, Error>>()?;
    Ok(Captures { sites, attention })
}

/// Attention site `i` of the archive.
fn attention_site(archive: &mut Archive, i: i64) -> Result<AttentionCapture, Error> {
    let key = |field: &str| format!("attention{i}_{field}");
    let name = archive.text(&key("name"))?;
    let p = archive.scalar(&key("p"))?;
    let (w_shape, weights) = archive.float_array(&key("weights"), 4)?;
    let (v_shape, values) = archive.float_array(&key("values"), 4)?;
    let (o_shape, out_weight) = archive.float_array(&key("out_weight"), 2)?;
    let (_, out_bias) = archive.float_array(&key("out_bias"), 1)?;
    let shape = (
        w_shape[0], w_shape[1], w_shape[2], w_shape[3], v_shape[3], o_shape[0],
    );
    if v_shape[..3] != [w_shape[0], w_shape[1], w_shape[3]] {
        return Err(archive.error(
            &key("values"),
            format!(
                "has shape {v_shape:?}, expected (batch, heads, keys) = {:?} first",
                [w_shape[0], w_shape[1], w_shape[3]]
            ),
        ));
    }
    AttentionCapture::new(name, p, shape, weights, values, out_weight, out_bias)
}

/// The `count` norm sites of the archive.
fn norm_sites(archive: &mut Archive, count: i64) -> Result<Vec<SiteCapture>, Error> {
    (0..count)
        .map(|i| {
            let key = |field: &str| format!("site{i}_{field}");
            let name = archive.text(&key("name"))?;
            norm_site(archive, &key, name.clone()).map_err(|e| at_site(e, &name))
        })
        .collect()
}

/// The per-channel arrays of a site (`gamma`, `beta`, LN2's): one entry per
/// column of `site{i}_v`, or an error naming the array, the file and `d`.
fn per_channel(
    archive: &mut Archive,
    key: &dyn Fn(&str) -> String,
    field: &str,
    d: usize,
) -> Result<Vec<f64>, Error> {
    let name = key(field);
    let (_, values) = archive.float_array(&name, 1)?;
    if values.len() != d {
        return Err(archive.error(
            &name,
            format!(
                "has {} entries, but {} has d = {d} columns (one entry per channel)",
                values.len(),
                key("v")
            ),
        ));
    }
    Ok(values)
}

/// Norm site `key("…")` of the archive, named `name`.
fn norm_site(
    archive: &mut Archive,
    key: &dyn Fn(&str) -> String,
    name: String,
) -> Result<SiteCapture, Error> {
    let form = archive.choice(
        &key("form"),
        &[
            ("plain", Form::Plain),
            ("bypass", Form::Bypass),
            ("compound", Form::Compound),
        ],
    )?;
    let layer = archive.choice(&key("norm"), &[("layer", true), ("rms", false)])?;
    let p = archive.scalar(&key("p"))?;
    let eps = archive.scalar(&key("eps"))?;
    let (shape, v) = archive.float_array(&key("v"), 2)?;
    let (h_shape, h) = archive.float_array(&key("h"), 2)?;
    if form == Form::Bypass && h_shape != shape {
        return Err(archive.error(
            &key("h"),
            format!("has shape {h_shape:?}, but {} has {shape:?}", key("v")),
        ));
    }
    let gamma = per_channel(archive, key, "gamma", shape[1])?;
    // An RMSNorm has no shift: its beta is not read.
    let beta = if layer {
        per_channel(archive, key, "beta", shape[1])?
    } else {
        archive.float_array(&key("beta"), 1)?.1
    };
    if form != Form::Compound {
        let site = SiteCapture::new(name, form, p, shape[1], v, h, layer, gamma, beta, eps)?;
        // Optional: the groups of channels sharing one mask bit.
        return match archive.optional_ints(&key("mask_groups"))? {
            Some(ids) if ids.iter().any(|id| *id < 0) => {
                Err(archive.error(&key("mask_groups"), "holds a negative group id"))
            }
            Some(ids) => {
                site.with_mask_groups(&ids.iter().map(|id| *id as usize).collect::<Vec<_>>())
            }
            None => Ok(site),
        };
    }
    let plain = SiteCapture::new(
        name,
        Form::Plain,
        p,
        shape[1],
        v,
        h,
        layer,
        gamma,
        beta,
        eps,
    )?;
    let gamma2 = per_channel(archive, key, "gamma2", shape[1])?;
    let beta2 = per_channel(archive, key, "beta2", shape[1])?;
    let eps2 = archive.scalar(&key("eps2"))?;
    plain.into_compound(gamma2, beta2, eps2)
}
