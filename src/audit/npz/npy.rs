//! One `.npy` member of an `.npz` capture (NEP 1, the `.npy` format; the
//! steps are in [`super`]'s docs): its header, shape and items.

/// One array of the archive.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Array {
    pub(super) shape: Vec<usize>,
    pub(super) values: Values,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Values {
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

/// Parses one `.npy` member ([`super`]'s docs, steps 1–4).
pub(super) fn parse_npy(bytes: &[u8]) -> Result<Array, String> {
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
