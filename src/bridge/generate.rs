//! Files written from the host's definitions, so that each fact has one source: the Lua
//! data and types of `setup()`'s options and the options section of the help, from
//! `LoopSettings` and `EditorOptions`; the types of the wire's replies and events, from
//! their schemas. `loopr generate` writes them; `loopr generate --check`
//! (and `tests/generated.rs`) fails while one is stale.

mod help;
mod lua_literal;
pub mod luacats;
mod options;
pub mod shape;
mod version;
mod wire;

use std::path::Path;

use anyhow::Context;

/// What developers run after changing a definition.
pub const COMMAND: &str = "cargo run -- generate";

/// A file, or a generated region of a hand-written one, and how to make it from the
/// definitions (given what the file holds now, for regions).
pub struct GeneratedFile {
    /// Relative to the repository's root.
    pub path: &'static str,
    render: fn(Option<&str>) -> anyhow::Result<String>,
}

impl GeneratedFile {
    /// What the file should hold, given what it holds now.
    pub fn render(&self, current: Option<&str>) -> anyhow::Result<String> {
        (self.render)(current).with_context(|| format!("generating {}", self.path))
    }

    fn read(&self, root: &Path) -> anyhow::Result<Option<String>> {
        match std::fs::read_to_string(root.join(self.path)) {
            Ok(text) => Ok(Some(text)),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(err) => Err(err).with_context(|| format!("reading {}", self.path)),
        }
    }
}

/// Every generated file.
pub fn files() -> Vec<GeneratedFile> {
    vec![
        GeneratedFile {
            path: "lua/loopr/generated/options.lua",
            render: options::options_lua,
        },
        GeneratedFile {
            path: "lua/loopr/generated/types.lua",
            render: options::types_lua,
        },
        GeneratedFile {
            path: "lua/loopr/generated/wire.lua",
            render: wire::wire_lua,
        },
        GeneratedFile {
            path: "lua/loopr/generated/version.lua",
            render: version::version_lua,
        },
        GeneratedFile {
            path: "doc/wire.md",
            render: wire::requests_md,
        },
        GeneratedFile {
            path: "doc/loopr.txt",
            render: help::help,
        },
    ]
}

/// The generated files under `root` that differ from what the definitions give.
pub fn stale(root: &Path) -> anyhow::Result<Vec<&'static str>> {
    let mut stale = Vec::new();
    for file in files() {
        let current = file.read(root)?;
        if current.as_deref() != Some(file.render(current.as_deref())?.as_str()) {
            stale.push(file.path);
        }
    }
    Ok(stale)
}

/// Writes the generated files under `root`; the paths of those that changed.
pub fn write(root: &Path) -> anyhow::Result<Vec<&'static str>> {
    let mut written = Vec::new();
    for file in files() {
        let current = file.read(root)?;
        let wanted = file.render(current.as_deref())?;
        if current.as_deref() != Some(wanted.as_str()) {
            let path = root.join(file.path);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)
                    .with_context(|| format!("creating {}", parent.display()))?;
            }
            std::fs::write(&path, wanted).with_context(|| format!("writing {}", file.path))?;
            written.push(file.path);
        }
    }
    Ok(written)
}
