//! The graph view's pure parts: the displayable model (`doc`), the layered layout
//! (`layout`) and the laid-out scene with collapsible scopes (`scene`). No drawing here.

pub mod doc;
pub mod layout;
pub mod picture;
pub mod scene;
pub mod synthetic;
