//! NPU Studio's application crate: the studio window and the `npu-studio` command line.

pub mod bench_layout;
pub mod cli;
pub mod cli_quant;
pub mod graph;
pub mod info;
pub mod studio;
