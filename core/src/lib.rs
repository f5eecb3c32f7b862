//! NPU Studio core: everything from model import to the FP32 reference executor, with no
//! GUI dependency. The app and the CLI talk to this crate only, through [`pipeline`] for
//! the stages and the stage modules for the values they return.

pub mod compiler;
pub mod emulator;
pub mod export;
pub mod import;
pub mod ir;
pub mod passes;
pub mod pipeline;
pub mod program;
pub mod progress;
pub mod quant;
pub mod report;
pub mod sim;
pub mod target;
