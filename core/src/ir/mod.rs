//! The intermediate representation every stage works on.

pub mod dtype;
pub mod model;
pub mod npy;
pub mod small;
pub mod tensor;

pub use dtype::DType;
pub use model::{
    Attr, Constant, Dim, Graph, Metadata, Model, Node, NodeId, Shape, ValidationError, Value, ValueId, ValueKind,
    concrete, shape_string,
};
pub use tensor::{Tensor, Val};
