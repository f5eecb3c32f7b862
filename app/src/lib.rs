//! NPU Studio's application crate: the studio window and the `npu-studio` command line.

pub mod bench_layout;
pub mod bench_quant_edit;
pub mod cli;
pub mod graph;
pub mod heap;
pub mod info;
pub mod studio;
