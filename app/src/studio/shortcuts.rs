//! Keyboard shortcuts: one table drives both the handler and the help window (F1), so the
//! help never lists a key that does nothing or misses one that does something.

use super::Studio;
use super::commands::{Command, Dialog, ExportFormat, Selection};
use egui::{Key, Modifiers};

/// What presses a shortcut.
#[derive(Clone, Copy, Debug)]
pub enum Binding {
    /// A chord with Ctrl (⌘ on macOS) or Ctrl+Shift: works while typing too.
    Chord(Modifiers, Key),
    /// A plain key (Shift allowed): only when no text field has the keyboard.
    Key(Key),
}

/// The command a binding sends, given the studio and the modifiers held.
type Action = fn(&Studio, Modifiers) -> Option<Command>;

/// One row of the help window and what it does.
pub struct Shortcut {
    /// As the help window shows it.
    pub keys: &'static str,
    pub what: &'static str,
    /// The bindings and their commands; empty for a pointer gesture the canvas handles
    /// (listed for the help).
    pub bindings: &'static [(Binding, Action)],
}

const CMD: Modifiers = Modifiers::COMMAND;
const CMD_SHIFT: Modifiers = Modifiers {
    shift: true,
    ..Modifiers::COMMAND
};

fn pan(dx: f32, dy: f32) -> Command {
    Command::PanBy(egui::vec2(dx, dy) * 60.0)
}

/// Every shortcut, in the order the help window lists them. Chords with Shift come before
/// the same chord without it (a chord matches with Shift held too).
pub const SHORTCUTS: &[Shortcut] = &[
    Shortcut {
        keys: "Ctrl+O",
        what: "open a model",
        bindings: &[(Binding::Chord(CMD, Key::O), |_, _| {
            Some(Command::Dialog(Dialog::OpenModel))
        })],
    },
    Shortcut {
        keys: "O",
        what: "show or hide the graph optimizer",
        bindings: &[(Binding::Key(Key::O), |_, _| Some(Command::ToggleOptimizer))],
    },
    Shortcut {
        keys: "Ctrl+F",
        what: "search nodes, ops and tensors",
        bindings: &[(Binding::Chord(CMD, Key::F), |_, _| Some(Command::FocusSearch))],
    },
    Shortcut {
        keys: "Enter / Shift+Enter",
        what: "next / previous match (in the search box)",
        bindings: &[],
    },
    Shortcut {
        keys: "N / Shift+N",
        what: "next / previous match",
        bindings: &[(Binding::Key(Key::N), |_, m| {
            Some(Command::SearchStep(if m.shift { -1 } else { 1 }))
        })],
    },
    Shortcut {
        keys: "drag, scroll, arrows",
        what: "pan",
        bindings: &[
            (Binding::Key(Key::ArrowLeft), |st, _| {
                Some(pan(-1.0 / st.view.zoom, 0.0))
            }),
            (Binding::Key(Key::ArrowRight), |st, _| {
                Some(pan(1.0 / st.view.zoom, 0.0))
            }),
            (Binding::Key(Key::ArrowUp), |st, _| Some(pan(0.0, -1.0 / st.view.zoom))),
            (Binding::Key(Key::ArrowDown), |st, _| Some(pan(0.0, 1.0 / st.view.zoom))),
        ],
    },
    Shortcut {
        keys: "Ctrl+scroll, pinch, + / −",
        what: "zoom",
        bindings: &[
            (Binding::Key(Key::Plus), |_, _| Some(Command::ZoomBy(1.25))),
            (Binding::Key(Key::Equals), |_, _| Some(Command::ZoomBy(1.25))),
            (Binding::Key(Key::Minus), |_, _| Some(Command::ZoomBy(0.8))),
        ],
    },
    Shortcut {
        keys: "F or 0",
        what: "fit the graph to the window",
        bindings: &[
            (Binding::Key(Key::F), |_, _| Some(Command::FitView)),
            (Binding::Key(Key::Num0), |_, _| Some(Command::FitView)),
        ],
    },
    Shortcut {
        keys: "Z or .",
        what: "zoom to the selection",
        bindings: &[
            (Binding::Key(Key::Z), |_, _| Some(Command::ZoomToSelection)),
            (Binding::Key(Key::Period), |_, _| Some(Command::ZoomToSelection)),
        ],
    },
    Shortcut {
        keys: "double-click a scope",
        what: "expand or collapse it",
        bindings: &[],
    },
    Shortcut {
        keys: "Enter",
        what: "expand or collapse the selected scope",
        bindings: &[(Binding::Key(Key::Enter), |st, _| match st.selection {
            Some(Selection::Scope(s)) => Some(Command::ToggleScope(s)),
            _ => None,
        })],
    },
    Shortcut {
        keys: "Shift+click, Shift+drag",
        what: "add nodes to the multi-selection",
        bindings: &[],
    },
    Shortcut {
        keys: "right-click a node",
        what: "set its precision (or the multi-selection's)",
        bindings: &[],
    },
    Shortcut {
        keys: "Ctrl+Z / Ctrl+Shift+Z",
        what: "undo / redo a precision edit",
        bindings: &[
            (Binding::Chord(CMD_SHIFT, Key::Z), |_, _| Some(Command::Redo)),
            (Binding::Chord(CMD, Key::Z), |_, _| Some(Command::Undo)),
        ],
    },
    Shortcut {
        keys: "Ctrl+S",
        what: "save the project",
        bindings: &[(Binding::Chord(CMD, Key::S), |_, _| Some(Command::SaveProject(None)))],
    },
    Shortcut {
        keys: "Q",
        what: "show or hide the quantization panel",
        bindings: &[(Binding::Key(Key::Q), |_, _| Some(Command::ToggleQuantize))],
    },
    Shortcut {
        keys: "P",
        what: "show or hide the pipeline",
        bindings: &[(Binding::Key(Key::P), |_, _| Some(Command::TogglePipeline))],
    },
    Shortcut {
        keys: "Esc",
        what: "clear the selection",
        bindings: &[(Binding::Key(Key::Escape), |_, _| Some(Command::ClearSelection))],
    },
    Shortcut {
        keys: "Ctrl+E / Ctrl+Shift+E",
        what: "export the view as PNG / SVG",
        bindings: &[
            (Binding::Chord(CMD_SHIFT, Key::E), |_, _| {
                Some(Command::Export(ExportFormat::Svg, None))
            }),
            (Binding::Chord(CMD, Key::E), |_, _| {
                Some(Command::Export(ExportFormat::Png, None))
            }),
        ],
    },
    Shortcut {
        keys: "Ctrl+T",
        what: "switch light / dark theme",
        bindings: &[(Binding::Chord(CMD, Key::T), |st, _| {
            Some(Command::SetDarkTheme(!st.settings.dark))
        })],
    },
    Shortcut {
        keys: "F1 or ?",
        what: "this help",
        bindings: &[
            (Binding::Key(Key::F1), |_, _| Some(Command::ToggleHelp)),
            (Binding::Key(Key::Questionmark), |_, _| Some(Command::ToggleHelp)),
        ],
    },
];

/// The commands this frame's key presses ask for: chords first (they work while typing),
/// then plain keys unless a text field has the keyboard.
pub fn commands(st: &Studio, ctx: &egui::Context) -> Vec<Command> {
    let mut out = Vec::new();
    let chords = SHORTCUTS
        .iter()
        .flat_map(|s| s.bindings)
        .filter(|(b, _)| matches!(b, Binding::Chord(..)));
    for (b, action) in chords {
        if let Binding::Chord(m, k) = *b
            && ctx.input_mut(|i| i.consume_shortcut(&egui::KeyboardShortcut::new(m, k)))
        {
            out.extend(action(st, m));
        }
    }
    if ctx.egui_wants_keyboard_input() {
        return out;
    }
    let keys = SHORTCUTS
        .iter()
        .flat_map(|s| s.bindings)
        .filter(|(b, _)| matches!(b, Binding::Key(_)));
    for (b, action) in keys {
        if let Binding::Key(k) = *b {
            let (pressed, m) = ctx.input(|i| (i.key_pressed(k) && !i.modifiers.command, i.modifiers));
            if pressed {
                out.extend(action(st, m));
            }
        }
    }
    out
}

/// The help window's table.
pub fn help_ui(ui: &mut egui::Ui) {
    egui::Grid::new("shortcuts").striped(true).show(ui, |ui| {
        for s in SHORTCUTS {
            ui.label(s.keys);
            ui.label(s.what);
            ui.end_row();
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_key_is_bound_once() {
        let mut seen = std::collections::HashSet::new();
        for s in SHORTCUTS {
            for (b, _) in s.bindings {
                let key = match b {
                    Binding::Chord(m, k) => (m.shift, m.command, *k),
                    Binding::Key(k) => (false, false, *k),
                };
                assert!(seen.insert(key), "{} binds {key:?} twice", s.keys);
            }
        }
        // Every plain key the help mentions first is bound (pointer gestures are not).
        for s in SHORTCUTS.iter().filter(|s| !s.bindings.is_empty()) {
            assert!(!s.keys.is_empty() && !s.what.is_empty());
        }
    }
}
