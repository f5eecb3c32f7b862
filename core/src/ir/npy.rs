//! `.npy` files (format versions 1–3) of every numpy dtype a [`Tensor`] holds: float16/32/64,
//! int8/16/32/64, uint8/16/32/64, bool and unicode strings, in either byte order and in C
//! or Fortran order; written back little-endian in C order with the same dtype. Dtypes no
//! tensor holds (complex, datetime, objects, raw bytes) are refused by name.

use super::Tensor;
use half::f16;
use ndarray::{ArrayD, IxDyn};
use std::io::Read as _;
use std::path::Path;

/// Why an `.npy` file cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum NpyError {
    #[error("cannot open it: {0}")]
    Open(std::io::Error),
    #[error("cannot write it: {0}")]
    Write(std::io::Error),
    #[error("not an .npy file: {0}")]
    Format(String),
    #[error("dtype {0} is not supported (float16/32/64, int8/16/32/64, uint8/16/32/64, bool and unicode strings are)")]
    Dtype(String),
}

/// The header of an `.npy` file.
#[derive(Debug, PartialEq)]
struct Header {
    descr: String,
    fortran: bool,
    shape: Vec<usize>,
}

/// The value of `key` in the header's Python dict literal.
fn field<'a>(h: &'a str, key: &str) -> Result<&'a str, NpyError> {
    let missing = || NpyError::Format(format!("the header has no '{key}': {h}"));
    let at = h
        .find(&format!("'{key}'"))
        .or_else(|| h.find(&format!("\"{key}\"")))
        .ok_or_else(missing)?;
    let rest = &h[at + key.len() + 2..];
    let rest = rest.trim_start().strip_prefix(':').ok_or_else(missing)?.trim_start();
    let end = if rest.starts_with('(') {
        rest.find(')').map(|i| i + 1)
    } else if let Some(q) = rest.chars().next().filter(|c| *c == '\'' || *c == '"') {
        rest[1..].find(q).map(|i| i + 2)
    } else {
        rest.find([',', '}'])
    };
    Ok(rest[..end.ok_or_else(missing)?].trim())
}

fn parse_header(h: &str) -> Result<Header, NpyError> {
    let descr = field(h, "descr")?;
    let descr = descr
        .strip_prefix(['\'', '"'])
        .and_then(|d| d.strip_suffix(['\'', '"']))
        .ok_or_else(|| NpyError::Dtype(format!("{descr} (a structured dtype)")))?;
    let fortran = match field(h, "fortran_order")? {
        "True" => true,
        "False" => false,
        other => return Err(NpyError::Format(format!("fortran_order is {other}"))),
    };
    let shape = field(h, "shape")?;
    let inner = shape
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .ok_or_else(|| NpyError::Format(format!("shape {shape}")))?;
    let shape = inner
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|d| {
            d.trim_end_matches('L')
                .parse::<usize>()
                .map_err(|_| NpyError::Format(format!("shape ({inner})")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Header {
        descr: descr.to_owned(),
        fortran,
        shape,
    })
}

/// numpy's name of a dtype descriptor, for messages.
fn dtype_name(descr: &str) -> String {
    let (kind, size) = (descr.get(1..2).unwrap_or(""), descr.get(2..).unwrap_or(""));
    let bits = size.parse::<usize>().map_or(0, |n| n * 8);
    let name = match kind {
        "c" => format!("complex{bits}"),
        "M" => "datetime64".into(),
        "m" => "timedelta64".into(),
        "O" => "object".into(),
        "S" | "a" => "bytes".into(),
        "V" => "void".into(),
        "U" => "str".into(),
        "f" => format!("float{bits}"),
        "i" => format!("int{bits}"),
        "u" => format!("uint{bits}"),
        "b" => "bool".into(),
        _ => "unknown".into(),
    };
    format!("{name} ('{descr}')")
}

/// Reads an `.npy` file.
pub fn read(path: &Path) -> Result<Tensor, NpyError> {
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .map_err(NpyError::Open)?;
    parse(&bytes)
}

/// An `.npy` file's bytes as a tensor.
pub fn parse(bytes: &[u8]) -> Result<Tensor, NpyError> {
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err(NpyError::Format("no \\x93NUMPY magic".into()));
    }
    let (len, start): (usize, usize) = match bytes[6] {
        1 => (usize::from(u16::from_le_bytes([bytes[8], bytes[9]])), 10),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
        v => return Err(NpyError::Format(format!("format version {v}"))),
    };
    let header = bytes
        .get(start..start.saturating_add(len))
        .ok_or_else(|| NpyError::Format("the header runs past the end".into()))?;
    let header = std::str::from_utf8(header).map_err(|_| NpyError::Format("the header is not text".into()))?;
    let h = parse_header(header)?;
    let data = &bytes[start + len..];
    let count = h
        .shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| NpyError::Format(format!("shape {:?} is too large", h.shape)))?;
    let descr = h.descr.as_str();
    let (order, kind, size) = (
        descr.get(..1).unwrap_or(""),
        descr.get(1..2).unwrap_or(""),
        descr.get(2..).and_then(|s| s.parse::<usize>().ok()).unwrap_or(0),
    );
    let big = match order {
        ">" => true,
        "<" | "|" | "=" => false,
        _ => return Err(NpyError::Dtype(dtype_name(descr))),
    };
    let need = (if kind == "U" { size.checked_mul(4) } else { Some(size) })
        .and_then(|w| count.checked_mul(w))
        .ok_or_else(|| NpyError::Format("the data is too large".into()))?;
    if need == 0 && count > 1 << 24 {
        return Err(NpyError::Format(format!(
            "{count} elements of {} hold no data",
            dtype_name(descr)
        )));
    }
    if data.len() < need {
        return Err(NpyError::Format(format!(
            "{} bytes of data for {count} elements of {}",
            data.len(),
            dtype_name(descr)
        )));
    }
    let data = &data[..need];
    // The file's shape, reversed for Fortran order (its data is the transpose in C order).
    let dims: Vec<usize> = if h.fortran {
        h.shape.iter().rev().copied().collect()
    } else {
        h.shape.clone()
    };
    macro_rules! num {
        ($t:ty, $n:expr, $v:ident) => {{
            let v: Vec<$t> = data
                .chunks_exact($n)
                .map(|c| {
                    let mut b = [0u8; $n];
                    b.copy_from_slice(c);
                    if big {
                        <$t>::from_be_bytes(b)
                    } else {
                        <$t>::from_le_bytes(b)
                    }
                })
                .collect();
            Tensor::$v(shaped(&dims, v)?)
        }};
    }
    let t = match (kind, size) {
        ("f", 2) => num!(f16, 2, F16),
        ("f", 4) => num!(f32, 4, F32),
        ("f", 8) => num!(f64, 8, F64),
        ("i", 1) => num!(i8, 1, I8),
        ("i", 2) => num!(i16, 2, I16),
        ("i", 4) => num!(i32, 4, I32),
        ("i", 8) => num!(i64, 8, I64),
        ("u", 1) => num!(u8, 1, U8),
        ("u", 2) => num!(u16, 2, U16),
        ("u", 4) => num!(u32, 4, U32),
        ("u", 8) => num!(u64, 8, U64),
        ("b", 1) => Tensor::Bool(shaped(&dims, data.iter().map(|&b| b != 0).collect())?),
        ("U", n) => {
            let v = data
                .chunks_exact(4 * n.max(1))
                .map(|c| {
                    c.chunks_exact(4)
                        .map(|b| {
                            let b = [b[0], b[1], b[2], b[3]];
                            if big {
                                u32::from_be_bytes(b)
                            } else {
                                u32::from_le_bytes(b)
                            }
                        })
                        .take_while(|&u| u != 0)
                        .map(|u| char::from_u32(u).ok_or_else(|| NpyError::Format(format!("code point {u:#x}"))))
                        .collect::<Result<String, _>>()
                })
                .collect::<Result<Vec<String>, _>>()?;
            if n == 0 {
                Tensor::Str(shaped(&dims, vec![String::new(); count])?)
            } else {
                Tensor::Str(shaped(&dims, v)?)
            }
        }
        _ => return Err(NpyError::Dtype(dtype_name(descr))),
    };
    Ok(if h.fortran { reverse_axes(t) } else { t })
}

fn shaped<T>(dims: &[usize], v: Vec<T>) -> Result<ArrayD<T>, NpyError> {
    ArrayD::from_shape_vec(IxDyn(dims), v).map_err(|e| NpyError::Format(e.to_string()))
}

/// `t` with its axes reversed, in C order.
fn reverse_axes(t: Tensor) -> Tensor {
    macro_rules! rev {
        ($a:expr) => {
            $a.reversed_axes().as_standard_layout().into_owned()
        };
    }
    match t {
        Tensor::F16(a) => Tensor::F16(rev!(a)),
        Tensor::F32(a) => Tensor::F32(rev!(a)),
        Tensor::F64(a) => Tensor::F64(rev!(a)),
        Tensor::I8(a) => Tensor::I8(rev!(a)),
        Tensor::I16(a) => Tensor::I16(rev!(a)),
        Tensor::I32(a) => Tensor::I32(rev!(a)),
        Tensor::I64(a) => Tensor::I64(rev!(a)),
        Tensor::U8(a) => Tensor::U8(rev!(a)),
        Tensor::U16(a) => Tensor::U16(rev!(a)),
        Tensor::U32(a) => Tensor::U32(rev!(a)),
        Tensor::U64(a) => Tensor::U64(rev!(a)),
        Tensor::Bool(a) => Tensor::Bool(rev!(a)),
        Tensor::Str(a) => Tensor::Str(rev!(a)),
        other => other,
    }
}

/// `t` as an `.npy` file (version 1.0, little-endian, C order) of its own dtype; bfloat16
/// and the small dtypes (numpy has none) as float32.
pub fn to_bytes(t: &Tensor) -> Vec<u8> {
    fn le<T: Copy>(a: &ArrayD<T>, f: impl Fn(T) -> Vec<u8>) -> Vec<u8> {
        a.iter().flat_map(|&v| f(v)).collect()
    }
    let (descr, shape, data): (String, Vec<usize>, Vec<u8>) = match t {
        Tensor::F16(a) => ("<f2".into(), a.shape().to_vec(), le(a, |v| v.to_le_bytes().to_vec())),
        Tensor::F32(a) => ("<f4".into(), a.shape().to_vec(), le(a, |v| v.to_le_bytes().to_vec())),
        Tensor::F64(a) => ("<f8".into(), a.shape().to_vec(), le(a, |v| v.to_le_bytes().to_vec())),
        Tensor::I8(a) => ("|i1".into(), a.shape().to_vec(), le(a, |v| v.to_le_bytes().to_vec())),
        Tensor::I16(a) => ("<i2".into(), a.shape().to_vec(), le(a, |v| v.to_le_bytes().to_vec())),
        Tensor::I32(a) => ("<i4".into(), a.shape().to_vec(), le(a, |v| v.to_le_bytes().to_vec())),
        Tensor::I64(a) => ("<i8".into(), a.shape().to_vec(), le(a, |v| v.to_le_bytes().to_vec())),
        Tensor::U8(a) => ("|u1".into(), a.shape().to_vec(), le(a, |v| vec![v])),
        Tensor::U16(a) => ("<u2".into(), a.shape().to_vec(), le(a, |v| v.to_le_bytes().to_vec())),
        Tensor::U32(a) => ("<u4".into(), a.shape().to_vec(), le(a, |v| v.to_le_bytes().to_vec())),
        Tensor::U64(a) => ("<u8".into(), a.shape().to_vec(), le(a, |v| v.to_le_bytes().to_vec())),
        Tensor::Bool(a) => ("|b1".into(), a.shape().to_vec(), le(a, |v| vec![u8::from(v)])),
        Tensor::Str(a) => {
            let n = a.iter().map(|s| s.chars().count()).max().unwrap_or(0).max(1);
            let mut d = Vec::with_capacity(a.len() * n * 4);
            for s in a {
                let mut k = 0;
                for c in s.chars() {
                    d.extend_from_slice(&u32::from(c).to_le_bytes());
                    k += 1;
                }
                d.resize(d.len() + (n - k) * 4, 0);
            }
            (format!("<U{n}"), a.shape().to_vec(), d)
        }
        other => {
            let a = other.to_f32();
            ("<f4".into(), a.shape().to_vec(), le(&a, |v| v.to_le_bytes().to_vec()))
        }
    };
    let dims = match shape.len() {
        1 => format!("({},)", shape[0]),
        _ => format!(
            "({})",
            shape.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
        ),
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {dims}, }}");
    // The data starts on a 64-byte boundary; the header ends with a newline.
    let (version, lead) = if u16::try_from(header.len() + 11).is_ok() {
        (1u8, 10)
    } else {
        (2, 12)
    };
    let total = (lead + header.len() + 1).div_ceil(64) * 64;
    header.push_str(&" ".repeat(total - lead - header.len() - 1));
    header.push('\n');
    let mut out = Vec::with_capacity(total + data.len());
    out.extend_from_slice(b"\x93NUMPY");
    out.extend_from_slice(&[version, 0]);
    if version == 1 {
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&(header.len() as u32).to_le_bytes());
    }
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(&data);
    out
}

/// Writes `t` to `path` atomically (see [`to_bytes`]).
pub fn write(path: &Path, t: &Tensor) -> Result<(), NpyError> {
    crate::export::write_atomic(path, &to_bytes(t)).map_err(|e| NpyError::Write(std::io::Error::other(e.to_string())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(t: &Tensor) -> Tensor {
        parse(&to_bytes(t)).expect("reads back")
    }

    #[test]
    fn every_dtype_round_trips() {
        let s = IxDyn(&[2, 3]);
        let ts = vec![
            Tensor::F16(ArrayD::from_shape_fn(s.clone(), |i| {
                f16::from_f32(i[0] as f32 - 0.5 * i[1] as f32)
            })),
            Tensor::F32(ArrayD::from_shape_fn(s.clone(), |i| i[0] as f32 * 1.5)),
            Tensor::F64(ArrayD::from_shape_fn(s.clone(), |i| -(i[1] as f64))),
            Tensor::I8(ArrayD::from_shape_fn(s.clone(), |i| -(i[1] as i8))),
            Tensor::I16(ArrayD::from_shape_fn(s.clone(), |i| -300 * i[1] as i16)),
            Tensor::I32(ArrayD::from_shape_fn(s.clone(), |i| -70000 * i[1] as i32)),
            Tensor::I64(ArrayD::from_shape_fn(s.clone(), |i| -(1i64 << 40) * i[0] as i64)),
            Tensor::U8(ArrayD::from_shape_fn(s.clone(), |i| 250 + i[1] as u8)),
            Tensor::U16(ArrayD::from_shape_fn(s.clone(), |i| 65000 + i[1] as u16)),
            Tensor::U32(ArrayD::from_shape_fn(s.clone(), |i| 4_000_000_000 + i[1] as u32)),
            Tensor::U64(ArrayD::from_shape_fn(s.clone(), |i| u64::MAX - i[1] as u64)),
            Tensor::Bool(ArrayD::from_shape_fn(s.clone(), |i| (i[0] + i[1]) % 2 == 0)),
            Tensor::Str(ArrayD::from_shape_fn(s, |i| "ab€".repeat(i[1]))),
            Tensor::F32(ArrayD::from_elem(IxDyn(&[]), 7.0)),
            Tensor::I64(ArrayD::from_elem(IxDyn(&[4]), 3)),
        ];
        for t in &ts {
            assert_eq!(&round_trip(t), t, "{:?}", t.dtype());
        }
    }

    #[test]
    fn big_endian_and_fortran_order_read() {
        // numpy: np.array([[1, 2, 3], [4, 5, 6]], dtype='>i2', order='F') saved.
        let header = "{'descr': '>i2', 'fortran_order': True, 'shape': (2, 3), }";
        let mut b = b"\x93NUMPY\x01\x00".to_vec();
        let padded = format!("{header:<117}\n");
        b.extend_from_slice(&(padded.len() as u16).to_le_bytes());
        b.extend_from_slice(padded.as_bytes());
        for v in [1i16, 4, 2, 5, 3, 6] {
            b.extend_from_slice(&v.to_be_bytes());
        }
        let t = parse(&b).expect("reads");
        let want = ArrayD::from_shape_vec(IxDyn(&[2, 3]), vec![1i16, 2, 3, 4, 5, 6]).expect("shape");
        assert_eq!(t, Tensor::I16(want));
    }

    #[test]
    fn mutated_files_are_refused_or_read_never_a_panic() {
        let t = Tensor::Str(ArrayD::from_shape_fn(IxDyn(&[2, 2]), |i| "x".repeat(i[0] + i[1])));
        let seeds = [
            to_bytes(&t),
            to_bytes(&Tensor::F32(ArrayD::from_elem(IxDyn(&[3, 2]), 1.0))),
        ];
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for k in 0..20_000 {
            let mut b = seeds[k % 2].clone();
            for _ in 0..=(next() % 4) {
                let i = (next() % b.len() as u64) as usize;
                match next() % 3 {
                    0 => b[i] = next() as u8,
                    1 => b.truncate(i),
                    _ => {
                        let pick = b"0123456789(),'<>UfiucM\x00\xff";
                        b.insert(i, pick[(next() % pick.len() as u64) as usize]);
                    }
                }
                if b.is_empty() {
                    break;
                }
            }
            let _ = parse(&b);
        }
    }

    #[test]
    fn unsupported_and_broken_files_are_named() {
        let file = |descr: &str, data: &[u8]| {
            let h = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': (1,), }}");
            let mut b = b"\x93NUMPY\x01\x00".to_vec();
            b.extend_from_slice(&(h.len() as u16).to_le_bytes());
            b.extend_from_slice(h.as_bytes());
            b.extend_from_slice(data);
            b
        };
        let e = parse(&file("<c8", &[0; 8])).expect_err("complex").to_string();
        assert!(e.contains("complex64"), "{e}");
        let e = parse(&file("<M8[ns]", &[0; 8])).expect_err("datetime").to_string();
        assert!(e.contains("datetime64"), "{e}");
        let e = parse(&file("<f4", &[0; 2])).expect_err("short").to_string();
        assert!(e.contains("2 bytes of data"), "{e}");
        assert!(parse(b"not numpy at all").is_err());
        assert!(parse(&file("<f4", &[0; 4])[..12]).is_err());
    }
}
