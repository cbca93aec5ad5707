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

use super::{AttentionCapture, Form, SiteCapture};
use crate::error::Error;

/// The layout version this reader understands.
pub const LAYOUT_VERSION: i64 = 2;

/// One array of the archive.
#[derive(Debug, Clone, PartialEq)]
struct Array {
    shape: Vec<usize>,
    values: Values,
}

#[derive(Debug, Clone, PartialEq)]
enum Values {
    Float(Vec<f64>),
    Int(Vec<i64>),
    Bytes(Vec<u8>),
}

/// The item types the reader accepts, by their `descr`.
fn item_size(descr: &str) -> Option<usize> {
    match descr {
        "<f8" | "<i8" => Some(8),
        "<f4" | "<i4" => Some(4),
        "|u1" | "<u1" => Some(1),
        _ => None,
    }
}

/// The value of `key` in the header dict: the text from after `'key':` up
/// to the next top-level `,` or `}` (a tuple's commas are inside parens).
fn header_field<'h>(header: &'h str, key: &str) -> Option<&'h str> {
    let start = header.find(&format!("'{key}'"))? + key.len() + 2;
    let rest = header[start..].trim_start().strip_prefix(':')?.trim_start();
    let mut depth = 0usize;
    for (i, c) in rest.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' | '}' if depth == 0 => return Some(rest[..i].trim()),
            _ => {}
        }
    }
    None
}

/// The little-endian items of `N` bytes, each read by `from` (the chunks
/// are exactly `N` long: `chunks_exact(N)`).
fn decode<const N: usize, T>(
    items: std::slice::ChunksExact<'_, u8>,
    from: impl Fn([u8; N]) -> T,
) -> Vec<T> {
    items
        .map(|c| from(c.try_into().unwrap_or([0; N])))
        .collect()
}

/// Parses one `.npy` member (module docs, steps 1–4).
fn parse_npy(bytes: &[u8]) -> Result<Array, String> {
    let magic = b"\x93NUMPY";
    if bytes.len() < 10 || &bytes[..6] != magic {
        return Err("not a .npy array (no \\x93NUMPY magic)".into());
    }
    let (header_len, start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
        v => return Err(format!(".npy format version {v} is not supported")),
    };
    let header = bytes
        .get(start..start + header_len)
        .and_then(|h| std::str::from_utf8(h).ok())
        .ok_or("the .npy header is cut short or not text")?;
    let descr = header_field(header, "descr")
        .map(|d| d.trim_matches(|c| c == '\'' || c == '"'))
        .ok_or("the .npy header has no descr")?;
    let size = item_size(descr).ok_or_else(|| {
        format!("item type {descr:?} is not one of float64, float32, int64, int32, uint8")
    })?;
    let fortran = match header_field(header, "fortran_order") {
        Some("False") => false,
        Some("True") => true,
        _ => return Err("the .npy header has no fortran_order".into()),
    };
    let shape_text = header_field(header, "shape").ok_or("the .npy header has no shape")?;
    let shape: Vec<usize> = shape_text
        .trim_start_matches('(')
        .trim_end_matches(')')
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<usize>())
        .collect::<Result<_, _>>()
        .map_err(|_| format!("the .npy shape {shape_text} is not a tuple of sizes"))?;
    let count: usize = shape.iter().product();
    let data = &bytes[start + header_len..];
    if data.len() != count * size {
        return Err(format!(
            "the .npy data holds {} bytes, its shape {shape:?} of {descr} needs {}",
            data.len(),
            count * size
        ));
    }
    let items = data.chunks_exact(size);
    let mut values = match descr {
        "<f8" => Values::Float(decode(items, f64::from_le_bytes)),
        "<f4" => Values::Float(decode(items, |b| f32::from_le_bytes(b) as f64)),
        "<i8" => Values::Int(decode(items, i64::from_le_bytes)),
        "<i4" => Values::Int(decode(items, |b| i32::from_le_bytes(b) as i64)),
        _ => Values::Bytes(data.to_vec()),
    };
    if fortran && shape.len() == 2 {
        if let Values::Float(v) = &mut values {
            let (rows, cols) = (shape[0], shape[1]);
            *v = (0..rows * cols)
                .map(|k| v[(k % cols) * rows + k / cols])
                .collect();
        }
    } else if fortran && shape.len() > 2 {
        return Err("a Fortran-ordered array of more than 2 dimensions".into());
    }
    Ok(Array { shape, values })
}

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

    fn float_array(&mut self, name: &str, dims: usize) -> Result<(Vec<usize>, Vec<f64>), Error> {
        let a = self.array(name)?;
        match a.values {
            Values::Float(v) if a.shape.len() == dims => Ok((a.shape, v)),
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
            let (_, h) = archive.float_array(&key("h"), 2)?;
            let (_, gamma) = archive.float_array(&key("gamma"), 1)?;
            let (_, beta) = archive.float_array(&key("beta"), 1)?;
            if form != Form::Compound {
                let site =
                    SiteCapture::new(name, form, p, shape[1], v, h, layer, gamma, beta, eps)?;
                // Optional: the groups of channels sharing one mask bit.
                return match archive.optional_ints(&key("mask_groups"))? {
                    Some(ids) if ids.iter().any(|id| *id < 0) => {
                        Err(archive.error(&key("mask_groups"), "holds a negative group id"))
                    }
                    Some(ids) => site
                        .with_mask_groups(&ids.iter().map(|id| *id as usize).collect::<Vec<_>>()),
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
            let (_, gamma2) = archive.float_array(&key("gamma2"), 1)?;
            let (_, beta2) = archive.float_array(&key("beta2"), 1)?;
            let eps2 = archive.scalar(&key("eps2"))?;
            plain.into_compound(gamma2, beta2, eps2)
        })
        .collect()
}

/// A version-1 `.npy` member as numpy writes it, for `data` of items
/// `descr` in `shape` (a Python tuple, such as `(64, 512)` or `()`): the
/// header padded with spaces so the data starts at a multiple of 64 bytes,
/// ending in a newline (NEP 1). The inverse of the reader; tests build
/// archives with it.
pub fn npy_member(descr: &str, shape: &str, data: &[u8]) -> Vec<u8> {
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn npy(descr: &str, shape: &str, data: &[u8]) -> Vec<u8> {
        npy_member(descr, shape, data)
    }

    fn f64s(v: &[f64]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn a_numpy_member_parses_to_its_shape_and_values() {
        let a = parse_npy(&npy("<f8", "(2, 3)", &f64s(&[1., 2., 3., 4., 5., 6.]))).unwrap();
        assert_eq!(a.shape, vec![2, 3]);
        assert_eq!(a.values, Values::Float(vec![1., 2., 3., 4., 5., 6.]));
        let s = parse_npy(&npy("<i8", "()", &7i64.to_le_bytes())).unwrap();
        assert_eq!((s.shape, s.values), (vec![], Values::Int(vec![7])));
        let t = parse_npy(&npy("|u1", "(3,)", b"rms")).unwrap();
        assert_eq!(t.values, Values::Bytes(b"rms".to_vec()));
    }

    #[test]
    fn a_fortran_ordered_matrix_is_read_in_c_order() {
        // Column-major [[1, 2, 3], [4, 5, 6]] is stored 1 4 2 5 3 6.
        let mut bytes = npy("<f8", "(2, 3)", &f64s(&[1., 4., 2., 5., 3., 6.]));
        let at = bytes.windows(5).position(|w| w == b"False").unwrap();
        bytes.splice(at..at + 5, b"True ".iter().copied());
        let a = parse_npy(&bytes).unwrap();
        assert_eq!(a.values, Values::Float(vec![1., 2., 3., 4., 5., 6.]));
    }

    #[test]
    fn damaged_members_are_errors_that_say_why() {
        let short = npy("<f8", "(2, 3)", &f64s(&[1., 2.]));
        assert!(parse_npy(&short).unwrap_err().contains("needs 48"));
        let complex = npy("<c16", "(1,)", &[0; 16]);
        assert!(parse_npy(&complex).unwrap_err().contains("not one of"));
        assert!(
            parse_npy(b"PK\x03\x04 not npy")
                .unwrap_err()
                .contains("magic")
        );
    }
}
