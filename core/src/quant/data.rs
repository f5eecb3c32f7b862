//! Calibration and evaluation sets: `.npy` files (one sample for a single-input model),
//! `.npz` files (one array per input name), images with a preprocessing spec, or synthetic
//! data. Samples are loaded one at a time as the pass streams over them.

use super::QuantError;
use crate::ir::{Dim, Model, Tensor};
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// How an image becomes an input tensor.
#[derive(Clone, Debug, PartialEq)]
pub struct Preprocess {
    /// Target height and width (default: the input's fixed dims).
    pub size: Option<(usize, usize)>,
    pub resize: Resize,
    pub bgr: bool,
    /// Multiplies the 0–255 pixel values first.
    pub scale: f32,
    pub mean: [f32; 3],
    pub std: [f32; 3],
    pub nhwc: bool,
    /// Element type of the tensor made (`f32`, or `u8`/`i8` for models that take integer
    /// images: values rounded and clamped).
    pub dtype: ImageDType,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageDType {
    F32,
    U8,
    I8,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resize {
    /// To the target size, aspect ratio ignored.
    Stretch,
    /// Keep the aspect ratio, pad centred (pad value 0 after normalization).
    Letterbox,
    /// Keep the aspect ratio, fit the height, pad (or cut) on the right (text recognizers).
    PadRight,
    /// Resize the short side, crop the centre.
    CenterCrop,
}

impl Default for Preprocess {
    fn default() -> Self {
        Self {
            size: None,
            resize: Resize::Stretch,
            bgr: false,
            scale: 1.0 / 255.0,
            mean: [0.0; 3],
            std: [1.0; 3],
            nhwc: false,
            dtype: ImageDType::F32,
        }
    }
}

impl Preprocess {
    /// Parses `key=value` pairs separated by `;`: `size=HxW`, `resize=stretch|letterbox|pad-right|center-crop`,
    /// `color=rgb|bgr`, `scale=F` (or `1/255`), `mean=a,b,c`, `std=a,b,c`, `layout=nchw|nhwc`,
    /// `dtype=f32|u8|i8`.
    pub fn parse(spec: &str) -> Result<Self, PreprocessError> {
        let mut p = Self::default();
        for part in spec.split(';').map(str::trim).filter(|s| !s.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| PreprocessError::NotKeyValue(part.to_owned()))?;
            let bad = |expected: &'static str| PreprocessError::Value {
                key: k.to_owned(),
                expected,
                value: v.to_owned(),
            };
            let num = |s: &str| -> Result<f32, PreprocessError> {
                if let Some((a, b)) = s.split_once('/') {
                    let (a, b): (f32, f32) = (
                        a.trim().parse().map_err(|_| bad("a number"))?,
                        b.trim().parse().map_err(|_| bad("a number"))?,
                    );
                    return Ok(a / b);
                }
                s.trim().parse().map_err(|_| bad("a number"))
            };
            let triple = |s: &str| -> Result<[f32; 3], PreprocessError> {
                let v: Vec<f32> = s.split(',').map(num).collect::<Result<_, _>>()?;
                match v.as_slice() {
                    [a] => Ok([*a; 3]),
                    [a, b, c] => Ok([*a, *b, *c]),
                    _ => Err(bad("one or three numbers")),
                }
            };
            match k.trim() {
                "size" => {
                    let (h, w) = v.split_once('x').ok_or_else(|| bad("HxW"))?;
                    p.size = Some((h.parse().map_err(|_| bad("HxW"))?, w.parse().map_err(|_| bad("HxW"))?));
                }
                "resize" => {
                    p.resize = match v {
                        "stretch" => Resize::Stretch,
                        "letterbox" => Resize::Letterbox,
                        "pad-right" => Resize::PadRight,
                        "center-crop" => Resize::CenterCrop,
                        _ => return Err(bad("stretch, letterbox, pad-right or center-crop")),
                    }
                }
                "color" => {
                    p.bgr = match v {
                        "rgb" => false,
                        "bgr" => true,
                        _ => return Err(bad("rgb or bgr")),
                    }
                }
                "scale" => p.scale = num(v)?,
                "mean" => p.mean = triple(v)?,
                "std" => {
                    p.std = triple(v)?;
                    if p.std.contains(&0.0) {
                        return Err(bad("non-zero values"));
                    }
                }
                "layout" => {
                    p.nhwc = match v {
                        "nchw" => false,
                        "nhwc" => true,
                        _ => return Err(bad("nchw or nhwc")),
                    }
                }
                "dtype" => {
                    p.dtype = match v {
                        "f32" | "float32" => ImageDType::F32,
                        "u8" | "uint8" => ImageDType::U8,
                        "i8" | "int8" => ImageDType::I8,
                        _ => return Err(bad("f32, u8 or i8")),
                    }
                }
                _ => return Err(PreprocessError::UnknownKey(k.to_owned())),
            }
        }
        Ok(p)
    }

    /// The spec `parse` reads back: only what differs from the defaults, `1/255` for that
    /// scale.
    pub fn to_spec(&self) -> String {
        let d = Self::default();
        let num = |x: f32| {
            if (x - 1.0 / 255.0).abs() < 1e-9 {
                "1/255".to_string()
            } else {
                format!("{x}")
            }
        };
        let triple = |t: [f32; 3]| {
            if t[0] == t[1] && t[1] == t[2] {
                num(t[0])
            } else {
                t.map(num).join(",")
            }
        };
        let mut parts = Vec::new();
        if let Some((h, w)) = self.size {
            parts.push(format!("size={h}x{w}"));
        }
        if self.resize != d.resize {
            parts.push(
                match self.resize {
                    Resize::Stretch => "resize=stretch",
                    Resize::Letterbox => "resize=letterbox",
                    Resize::PadRight => "resize=pad-right",
                    Resize::CenterCrop => "resize=center-crop",
                }
                .to_string(),
            );
        }
        if self.bgr {
            parts.push("color=bgr".into());
        }
        if self.scale != d.scale {
            parts.push(format!("scale={}", num(self.scale)));
        }
        if self.mean != d.mean {
            parts.push(format!("mean={}", triple(self.mean)));
        }
        if self.std != d.std {
            parts.push(format!("std={}", triple(self.std)));
        }
        if self.nhwc {
            parts.push("layout=nhwc".into());
        }
        match self.dtype {
            ImageDType::F32 => {}
            ImageDType::U8 => parts.push("dtype=u8".into()),
            ImageDType::I8 => parts.push("dtype=i8".into()),
        }
        parts.join(";")
    }

    /// Decodes and preprocesses one image file into a `1×3×H×W` (or `1×H×W×3`) tensor.
    pub fn load_image(&self, path: &Path, input_shape: Option<&[Dim]>) -> Result<Tensor, ImageError> {
        use image::imageops::{FilterType, resize};
        let img = image::ImageReader::open(path)
            .map_err(|e| ImageError::Read(e.to_string()))?
            .with_guessed_format()
            .map_err(|e| ImageError::Read(e.to_string()))?
            .decode()
            .map_err(|e| ImageError::Decode(e.to_string()))?
            .to_rgb8();
        // An NHWC input (a TFLite model's: last dim 3, second not) takes NHWC images even
        // when the spec does not say `layout=nhwc`.
        let nhwc =
            self.nhwc || input_shape.is_some_and(|d| d.len() == 4 && d[3] == Dim::Fixed(3) && d[1] != Dim::Fixed(3));
        let (h, w) = match (self.size, input_shape) {
            (Some(s), _) => s,
            (None, Some(dims)) if dims.len() == 4 => {
                let (hd, wd) = if nhwc {
                    (&dims[1], &dims[2])
                } else {
                    (&dims[2], &dims[3])
                };
                match (hd, wd) {
                    (Dim::Fixed(h), Dim::Fixed(w)) => (*h, *w),
                    _ => return Err(ImageError::DynamicSize),
                }
            }
            _ => return Err(ImageError::NeedSize),
        };
        let (iw, ih) = (img.width() as usize, img.height() as usize);
        if iw == 0 || ih == 0 {
            return Err(ImageError::Empty);
        }
        let fit = |rw: usize, rh: usize| resize(&img, rw.max(1) as u32, rh.max(1) as u32, FilterType::Triangle);
        // (resized image, its offset in the target canvas)
        let (r, ox, oy): (image::RgbImage, isize, isize) = match self.resize {
            Resize::Stretch => (fit(w, h), 0, 0),
            Resize::Letterbox => {
                let s = (w as f64 / iw as f64).min(h as f64 / ih as f64);
                let (rw, rh) = ((iw as f64 * s).round() as usize, (ih as f64 * s).round() as usize);
                (
                    fit(rw, rh),
                    ((w - rw.min(w)) / 2) as isize,
                    ((h - rh.min(h)) / 2) as isize,
                )
            }
            Resize::PadRight => {
                let rw = ((h as f64 * iw as f64 / ih as f64).ceil() as usize).min(w);
                (fit(rw, h), 0, 0)
            }
            Resize::CenterCrop => {
                let s = (w as f64 / iw as f64).max(h as f64 / ih as f64);
                let (rw, rh) = ((iw as f64 * s).round() as usize, (ih as f64 * s).round() as usize);
                (
                    fit(rw, rh),
                    -(((rw.max(w) - w) / 2) as isize),
                    -(((rh.max(h) - h) / 2) as isize),
                )
            }
        };
        let mut out = vec![0f32; 3 * h * w];
        // Padding is 0 after normalization (as PaddleOCR pads).
        for y in 0..h {
            for x in 0..w {
                let (sx, sy) = (x as isize - ox, y as isize - oy);
                if sx < 0 || sy < 0 || sx as u32 >= r.width() || sy as u32 >= r.height() {
                    continue;
                }
                let px = r.get_pixel(sx as u32, sy as u32).0;
                for c in 0..3 {
                    let src = if self.bgr { 2 - c } else { c };
                    let v = (f32::from(px[src]) * self.scale - self.mean[c]) / self.std[c];
                    let i = if nhwc {
                        (y * w + x) * 3 + c
                    } else {
                        c * h * w + y * w + x
                    };
                    out[i] = v;
                }
            }
        }
        let shape = if nhwc { [1, h, w, 3] } else { [1, 3, h, w] };
        let t = Tensor::from_f32(&shape, out).ok_or(ImageError::Empty)?;
        Ok(match (self.dtype, t) {
            (ImageDType::U8, Tensor::F32(a)) => Tensor::U8(a.mapv(|v| v.round().clamp(0.0, 255.0) as u8)),
            (ImageDType::I8, Tensor::F32(a)) => Tensor::I8(a.mapv(|v| v.round().clamp(-128.0, 127.0) as i8)),
            (_, t) => t,
        })
    }
}

/// A preprocessing spec that cannot be read: each names the part or key.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PreprocessError {
    #[error("preprocessing: `{0}` is not key=value")]
    NotKeyValue(String),
    #[error("preprocessing: {key}: {expected}, got `{value}`")]
    Value {
        key: String,
        expected: &'static str,
        value: String,
    },
    #[error("preprocessing: unknown key `{0}` (size, resize, color, scale, mean, std, layout, dtype)")]
    UnknownKey(String),
}

/// An image that cannot become an input tensor (the caller names the file).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ImageError {
    #[error("{0}")]
    Read(String),
    #[error("cannot decode the image: {0}")]
    Decode(String),
    #[error("the model input has dynamic height or width: give size=HxW")]
    DynamicSize,
    #[error("give size=HxW in the preprocessing spec")]
    NeedSize,
    #[error("the image is empty")]
    Empty,
}

/// A calibration or evaluation set that cannot be listed or read: each names the path,
/// file or input.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DataError {
    #[error("{0}: expected synthetic:N with N > 0")]
    Synthetic(String),
    #[error("{0}: no such file or folder")]
    Missing(String),
    #[error("{path}: {message}")]
    Unreadable { path: String, message: String },
    #[error("{0}: no .npy, .npz, .png or .jpg files in this folder")]
    NoSamples(String),
    /// One sample file (named) cannot be used.
    #[error("{file}: {problem}")]
    Sample { file: String, problem: SampleProblem },
    #[error("input `{0}` has no shape for synthetic data")]
    NoShape(String),
}

/// Why one sample file cannot be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SampleProblem {
    /// A `.npy` or image for a model with several inputs.
    SeveralInputs(usize),
    Read(String),
    NotNpz(String),
    /// An `.npz` without an array of that input's name.
    NoArray {
        input: String,
        message: String,
    },
    NotNpy(String),
    Image(ImageError),
    NoTensor(String),
    Shape {
        input: String,
        expected: String,
        found: Vec<usize>,
    },
    NonFinite {
        input: String,
        index: usize,
    },
}

impl fmt::Display for SampleProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::SeveralInputs(n) => write!(
                f,
                "the model has {n} inputs; use .npz files with one array per input name"
            ),
            Self::Read(m) => f.write_str(m),
            Self::NotNpz(m) => write!(f, "not a readable .npz: {m}"),
            Self::NoArray { input, message } => write!(f, "no array named `{input}`: {message}"),
            Self::NotNpy(m) => write!(f, "not a usable .npy file: {m}"),
            Self::Image(e) => write!(f, "{e}"),
            Self::NoTensor(input) => write!(f, "no tensor for input `{input}`"),
            Self::Shape { input, expected, found } => {
                write!(f, "input `{input}` expects shape {expected}, the file holds {found:?}")
            }
            Self::NonFinite { input, index } => {
                write!(f, "input `{input}` holds a non-finite value at flat index {index}")
            }
        }
    }
}

/// Where samples come from.
#[derive(Clone, Debug)]
pub enum Source {
    Files(Vec<PathBuf>),
    /// N random samples (normal, mean 0, std 1) with the input's shape.
    Synthetic(usize),
    /// The synthetic samples `start..start + n` (a held-back part of a synthetic set).
    SyntheticFrom(usize, usize),
}

const IMAGE_EXT: &[&str] = &["png", "jpg", "jpeg"];

/// Lists a calibration path: a folder (its `.npy`, `.npz` and image files, sorted), one
/// file, or `synthetic:N`.
pub fn source(path: &str) -> Result<Source, DataError> {
    if let Some(n) = path.strip_prefix("synthetic:") {
        let n = n
            .parse::<usize>()
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| DataError::Synthetic(path.to_owned()))?;
        return Ok(Source::Synthetic(n));
    }
    let p = Path::new(path);
    if !p.exists() {
        return Err(DataError::Missing(path.to_owned()));
    }
    if p.is_file() {
        return Ok(Source::Files(vec![p.to_path_buf()]));
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(p)
        .map_err(|e| DataError::Unreadable {
            path: path.to_owned(),
            message: e.to_string(),
        })?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|f| {
            f.extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| e == "npy" || e == "npz" || IMAGE_EXT.contains(&e.to_ascii_lowercase().as_str()))
        })
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(DataError::NoSamples(path.to_owned()));
    }
    Ok(Source::Files(files))
}

/// How many of `n` samples a data-driven choice holds back to be judged on: the last
/// third (at least one), none under three samples.
pub fn held_back_len(n: usize) -> usize {
    if n < 3 { 0 } else { n / 3 }
}

impl Source {
    pub fn len(&self) -> usize {
        match self {
            Self::Files(f) => f.len(),
            Self::Synthetic(n) | Self::SyntheticFrom(_, n) => *n,
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The set split for a data-driven choice judged on samples it was not fitted to:
    /// (fit, held back), the last [`held_back_len`] samples held back; `None` under three.
    /// The part to fit a data-driven choice on, the part to judge it on, and how many
    /// samples are held back: [`Self::held_back_split`], or the whole set twice (0 held
    /// back) when it is too small to split.
    pub fn fit_and_judge(&self) -> (Self, Self, usize) {
        match self.held_back_split() {
            Some((fit, held)) => {
                let n = held.len();
                (fit, held, n)
            }
            None => (self.clone(), self.clone(), 0),
        }
    }

    pub fn held_back_split(&self) -> Option<(Self, Self)> {
        let n = self.len();
        let held = held_back_len(n);
        if held == 0 {
            return None;
        }
        Some(match self {
            Self::Files(f) => (Self::Files(f[..n - held].to_vec()), Self::Files(f[n - held..].to_vec())),
            Self::Synthetic(_) => (Self::Synthetic(n - held), Self::SyntheticFrom(n - held, held)),
            Self::SyntheticFrom(start, _) => (
                Self::SyntheticFrom(*start, n - held),
                Self::SyntheticFrom(start + n - held, held),
            ),
        })
    }

    /// Streams the samples, each checked against the model's inputs (dtype, rank, fixed
    /// dims, finite values); errors name the file.
    pub fn samples<'a>(
        &'a self,
        model: &'a Model,
        pre: &'a Preprocess,
    ) -> impl Iterator<Item = Result<(String, HashMap<String, Tensor>), QuantError>> + 'a {
        (0..self.len()).map(move |i| match self {
            Self::Files(f) => {
                let p = &f[i];
                let label = p.display().to_string();
                load_file(p, model, pre)
                    .and_then(|s| check(model, &s).map(|()| s))
                    .map(|s| (label.clone(), s))
                    .map_err(|problem| {
                        QuantError::Samples(DataError::Sample {
                            file: label.clone(),
                            problem,
                        })
                    })
            }
            Self::Synthetic(_) => synthetic(model, i as u64).map(|s| (format!("synthetic sample {i}"), s)),
            Self::SyntheticFrom(start, _) => {
                let i = start + i;
                synthetic(model, i as u64).map(|s| (format!("synthetic sample {i}"), s))
            }
        })
    }
}

fn load_file(p: &Path, model: &Model, pre: &Preprocess) -> Result<HashMap<String, Tensor>, SampleProblem> {
    let g = &model.graph;
    let ext = p
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    let only_input = || -> Result<(String, Option<Vec<Dim>>), SampleProblem> {
        match g.inputs.as_slice() {
            [i] => Ok((g.values[*i].name.clone(), g.values[*i].shape.clone())),
            _ => Err(SampleProblem::SeveralInputs(g.inputs.len())),
        }
    };
    let mut out = HashMap::new();
    match ext.as_str() {
        "npy" => {
            let (name, _) = only_input()?;
            let dtype = g.inputs.first().and_then(|&i| g.values[i].dtype);
            out.insert(name, read_npy(p, dtype)?);
        }
        "npz" => {
            let f = std::fs::File::open(p).map_err(|e| SampleProblem::Read(e.to_string()))?;
            let mut z = zip::ZipArchive::new(f).map_err(|e| SampleProblem::NotNpz(e.to_string()))?;
            for &i in &g.inputs {
                let name = &g.values[i].name;
                let bytes = npz_member(&mut z, name)?;
                let t =
                    crate::ir::npy::parse(&bytes).map_err(|e| SampleProblem::NotNpy(format!("array `{name}`: {e}")))?;
                out.insert(name.clone(), to_input_dtype(t, g.values[i].dtype)?);
            }
        }
        _ => {
            let (name, shape) = only_input()?;
            out.insert(name, pre.load_image(p, shape.as_deref()).map_err(SampleProblem::Image)?);
        }
    }
    Ok(out)
}

/// The bytes of the `.npz` member holding `input` (`input.npy`, or `input` as numpy also
/// accepts); the error lists the arrays the archive holds.
fn npz_member(z: &mut zip::ZipArchive<std::fs::File>, input: &str) -> Result<Vec<u8>, SampleProblem> {
    use std::io::Read;
    for member in [format!("{input}.npy"), input.to_owned()] {
        if let Ok(mut f) = z.by_name(&member) {
            let mut bytes = Vec::new();
            f.read_to_end(&mut bytes)
                .map_err(|e| SampleProblem::Read(format!("array `{input}`: {e}")))?;
            return Ok(bytes);
        }
    }
    let held: Vec<&str> = z.file_names().map(|n| n.strip_suffix(".npy").unwrap_or(n)).collect();
    Err(SampleProblem::NoArray {
        input: input.to_owned(),
        message: format!("the archive holds {held:?}"),
    })
}

/// An `.npy` sample for `input`: floats become float32 for a float input; integers and
/// booleans are cast to an integer or boolean input's dtype (token ids, byte values, masks)
/// and to float32 for a float input (pixels saved as uint8).
fn read_npy(p: &Path, input: Option<crate::ir::DType>) -> Result<Tensor, SampleProblem> {
    let t = crate::ir::npy::read(p).map_err(|e| SampleProblem::NotNpy(e.to_string()))?;
    to_input_dtype(t, input)
}

/// A sample array in the dtype its input takes (see [`read_npy`]).
fn to_input_dtype(t: Tensor, input: Option<crate::ir::DType>) -> Result<Tensor, SampleProblem> {
    use crate::ir::DType;
    let from = t.dtype();
    let to = match input {
        Some(d) if !d.is_float() => d,
        _ => DType::F32,
    };
    if from == to {
        return Ok(t);
    }
    if from.is_float() && !to.is_float() {
        return Err(SampleProblem::NotNpy(format!(
            "the input is {to}, the file holds {from}: save the values as integers"
        )));
    }
    crate::sim::cast(&t, to).map_err(|e| SampleProblem::NotNpy(e.to_string()))
}

/// Checks a sample against the model's declared inputs.
fn check(model: &Model, s: &HashMap<String, Tensor>) -> Result<(), SampleProblem> {
    let g = &model.graph;
    for &i in &g.inputs {
        let v = &g.values[i];
        let t = s.get(&v.name).ok_or_else(|| SampleProblem::NoTensor(v.name.clone()))?;
        if let Some(shape) = &v.shape {
            let ok = shape.len() == t.shape().len()
                && shape.iter().zip(t.shape()).all(|(d, &n)| match d {
                    Dim::Fixed(k) => *k == n,
                    Dim::Sym(_) => n > 0,
                });
            if !ok {
                return Err(SampleProblem::Shape {
                    input: v.name.clone(),
                    expected: crate::ir::shape_string(shape),
                    found: t.shape().to_vec(),
                });
            }
        }
        if let Tensor::F32(a) = t
            && let Some(index) = a.iter().position(|x| !x.is_finite())
        {
            return Err(SampleProblem::NonFinite {
                input: v.name.clone(),
                index,
            });
        }
    }
    Ok(())
}

/// A deterministic normal sample per input (fixed dims; symbolic dims become 1).
fn synthetic(model: &Model, seed: u64) -> Result<HashMap<String, Tensor>, QuantError> {
    let g = &model.graph;
    let mut out = HashMap::new();
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut uniform = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        ((state >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    };
    for &i in &g.inputs {
        let v = &g.values[i];
        let shape: Vec<usize> = v
            .shape
            .as_ref()
            .ok_or_else(|| DataError::NoShape(v.name.clone()))?
            .iter()
            .map(|d| match d {
                Dim::Fixed(k) => *k,
                Dim::Sym(_) => 1,
            })
            .collect();
        let n: usize = shape.iter().product();
        let data: Vec<f32> = (0..n)
            .map(|_| {
                let (a, b) = (uniform(), uniform());
                ((-2.0 * a.ln()).sqrt() * (std::f64::consts::TAU * b).cos()) as f32
            })
            .collect();
        let t =
            Tensor::from_f32(&shape, data).ok_or_else(|| QuantError::Data(format!("input `{}`: bad shape", v.name)))?;
        out.insert(v.name.clone(), t);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn spec_round_trips() {
        for spec in [
            "",
            "size=48x192;color=bgr;mean=0.5;std=0.5",
            "size=640x640;resize=letterbox;scale=1;mean=0.485,0.456,0.406;std=0.229,0.224,0.225;layout=nhwc;dtype=u8",
            "resize=center-crop;scale=0.007843138;dtype=i8",
        ] {
            let p = super::Preprocess::parse(spec).expect(spec);
            assert_eq!(p.to_spec(), spec);
            assert_eq!(super::Preprocess::parse(&p.to_spec()).expect("again"), p);
        }
    }

    use super::*;

    #[test]
    fn image_dtype_and_layout() {
        let dir = std::env::temp_dir().join(format!("npu_pre_{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("tmp");
        let path = dir.join("px.png");
        let img = image::RgbImage::from_fn(4, 2, |x, y| image::Rgb([(x * 60) as u8, (y * 200) as u8, 7]));
        img.save(&path).expect("png");
        // Raw pixels as uint8, NHWC, BGR.
        let p = Preprocess::parse("size=2x4;dtype=u8;scale=1;layout=nhwc;color=bgr").expect("spec");
        let Tensor::U8(a) = p.load_image(&path, None).expect("loads") else {
            panic!("not u8")
        };
        assert_eq!(a.shape(), &[1, 2, 4, 3]);
        assert_eq!(a[[0, 1, 3, 0]], 7);
        assert_eq!(a[[0, 1, 3, 1]], 200);
        assert_eq!(a[[0, 1, 3, 2]], 180);
        // int8 after a shift clamps.
        let p = Preprocess::parse("size=2x4;dtype=i8;scale=1;mean=128").expect("spec");
        let Tensor::I8(a) = p.load_image(&path, None).expect("loads") else {
            panic!("not i8")
        };
        assert_eq!(a[[0, 0, 0, 0]], -128);
        assert_eq!(a[[0, 1, 1, 0]], 72);
        let e = Preprocess::parse("dtype=f64").expect_err("unknown dtype");
        assert!(
            matches!(&e, PreprocessError::Value { key, value, .. } if key == "dtype" && value == "f64"),
            "{e}"
        );
        assert!(e.to_string().contains("dtype") && e.to_string().contains("f64"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// `.npz` samples keep every input's dtype: an int64 scalar (a sample rate), an int32
    /// id vector and a bool mask beside a float32 signal; a missing array is named.
    #[test]
    fn npz_arrays_of_any_dtype() {
        use crate::ir::{DType, Value};
        use ndarray::{ArrayD, IxDyn, arr0, arr1};
        let dir = std::env::temp_dir().join(format!("npu_npz_{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("tmp");
        let mut m = Model::default();
        for (name, dt, shape) in [
            ("x", DType::F32, vec![1, 3]),
            ("sr", DType::I64, vec![]),
            ("ids", DType::I32, vec![2]),
            ("mask", DType::Bool, vec![2]),
        ] {
            let mut v = Value::new(name);
            v.dtype = Some(dt);
            v.shape = Some(shape.into_iter().map(Dim::Fixed).collect());
            m.graph.values.push(v);
            m.graph.inputs.push(m.graph.values.len() - 1);
        }
        let path = dir.join("s.npz");
        let mut w = ndarray_npy::NpzWriter::new(std::fs::File::create(&path).expect("create"));
        w.add_array(
            "x",
            &ArrayD::from_shape_vec(IxDyn(&[1, 3]), vec![0.5f32, -1.0, 2.0]).expect("shape"),
        )
        .expect("x");
        w.add_array("sr", &arr0(16_000i64)).expect("sr");
        w.add_array("ids", &arr1(&[7i32, 300])).expect("ids");
        w.add_array("mask", &arr1(&[true, false])).expect("mask");
        w.finish().expect("finish");
        let src = Source::Files(vec![path.clone()]);
        let pre = Preprocess::default();
        let (_, s) = src.samples(&m, &pre).next().expect("one").expect("loads");
        assert!(matches!(&s["x"], Tensor::F32(a) if a[[0, 2]] == 2.0));
        assert!(matches!(&s["sr"], Tensor::I64(a) if a.ndim() == 0 && a.iter().next() == Some(&16_000)));
        assert!(matches!(&s["ids"], Tensor::I32(a) if a.as_slice() == Some(&[7, 300][..])));
        assert!(matches!(&s["mask"], Tensor::Bool(a) if a.as_slice() == Some(&[true, false][..])));
        // An input the archive lacks is named, with what it holds.
        m.graph.values[1].name = "rate".into();
        let e = src
            .samples(&m, &pre)
            .next()
            .expect("one")
            .expect_err("no `rate`")
            .to_string();
        assert!(
            e.contains("s.npz") && e.contains("`rate`") && e.contains("\"sr\""),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The held-back split: the last third (at least one sample), disjoint from the rest,
    /// for files and synthetic sets alike; no split under three samples.
    #[test]
    fn held_back_split_is_disjoint() {
        let files: Vec<PathBuf> = (0..7).map(|k| PathBuf::from(format!("s{k}.npy"))).collect();
        let (fit, held) = Source::Files(files.clone()).held_back_split().expect("splits");
        let (Source::Files(a), Source::Files(b)) = (&fit, &held) else {
            panic!("files stay files")
        };
        assert_eq!((a.len(), b.len()), (5, 2));
        assert_eq!([a.clone(), b.clone()].concat(), files);
        assert!(Source::Files(files[..2].to_vec()).held_back_split().is_none());
        let (fit, held) = Source::Synthetic(6).held_back_split().expect("splits");
        assert_eq!((fit.len(), held.len()), (4, 2));
        let mut m = Model::default();
        let mut v = crate::ir::Value::new("x");
        v.dtype = Some(crate::ir::DType::F32);
        v.shape = Some(vec![Dim::Fixed(4)]);
        m.graph.values.push(v);
        m.graph.inputs.push(0);
        let pre = Preprocess::default();
        let labels = |s: &Source| -> Vec<String> { s.samples(&m, &pre).map(|r| r.expect("sample").0).collect() };
        let all = labels(&Source::Synthetic(6));
        assert_eq!([labels(&fit), labels(&held)].concat(), all);
        let first = |s: &Source| s.samples(&m, &pre).next().expect("one").expect("sample").1["x"].clone();
        assert_eq!(
            first(&held),
            Source::Synthetic(6)
                .samples(&m, &pre)
                .nth(4)
                .expect("fifth")
                .expect("sample")
                .1["x"]
        );
    }
}
