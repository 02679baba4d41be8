//! Rules of the source tree that no compiler checks: what writes to stdout, that every file
//! says what it owns, that the core knows nothing of Neovim, that files stay small, and that
//! the files of one folder do not import each other in a circle, and that ARCHITECTURE.md
//! is a short map naming every module and no path that is gone.
//!
//! The tree checked is `$CARGO_MANIFEST_DIR/src` as cargo sets it when the tests run, so the
//! built test binary can be pointed at a copy of the tree with a fault planted in it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use regex::Regex;

/// The `src` directory of the tree under test.
fn source_root() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
        .join("src")
}

/// Every `.rs` file under `src`, sorted, with its text.
fn sources() -> Vec<(PathBuf, String)> {
    let src = source_root();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    files
        .into_iter()
        .map(|file| {
            let text = std::fs::read_to_string(&file).expect("read");
            let relative = file.strip_prefix(&src).expect("under src").to_path_buf();
            (relative, text)
        })
        .collect()
}

/// The path of a file below `src`, with `/` between its parts.
fn slashed(path: &Path) -> String {
    path.components()
        .map(|part| part.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/")
}

fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            found.push(path);
        }
    }
}

/// Whether `code` calls `name` itself (`eprintln!(` is not `println!(`).
fn calls(code: &str, name: &str) -> bool {
    code.match_indices(name).any(|(at, _)| {
        !code[..at]
            .chars()
            .next_back()
            // A method of the same name (a child process's `.stdout()` pipe) is not the call.
            .is_some_and(|before| before.is_alphanumeric() || before == '_' || before == '.')
    })
}

/// In `loopr rpc` stdout carries msgpack-RPC: one stray byte breaks Neovim's channel. Only
/// the command line's own output (`cli.rs`) and `main.rs`'s subcommands that never serve RPC
/// may print to it.
#[test]
fn only_the_command_line_writes_to_stdout() {
    let src = source_root();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let allowed = [src.join("cli.rs"), src.join("main.rs")];
    let mut offending = Vec::new();
    for file in files.iter().filter(|file| !allowed.contains(file)) {
        let text = std::fs::read_to_string(file).expect("read");
        for (number, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if ["print!(", "println!(", "stdout()", "dbg!("]
                .iter()
                .any(|writes| calls(code, writes))
            {
                offending.push(format!(
                    "{}:{}: {}",
                    file.display(),
                    number + 1,
                    line.trim()
                ));
            }
        }
    }
    assert!(offending.is_empty(), "{}", offending.join("\n"));
}

/// Every source file opens with a `//!` doc saying what it owns: the map a reader starts from.
#[test]
fn every_source_file_opens_with_a_module_doc() {
    let missing: Vec<String> = sources()
        .into_iter()
        .filter(|(_, text)| !text.trim_start().starts_with("//!"))
        .map(|(file, _)| {
            format!(
                "src/{}: add a `//!` doc saying what it owns",
                slashed(&file)
            )
        })
        .collect();
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

/// What the core must not mention: it knows nothing of Neovim, its RPC encoding or its
/// commands; only the shells (`src/bridge/`, `src/cli.rs` with `src/cli/`, `src/main.rs`) word
/// things for one.
const SHELL_ONLY: [&str; 4] = ["nvim_rs", "rmpv", "crate::bridge", ":Loopr"];

fn is_shell(file: &str) -> bool {
    file == "bridge.rs"
        || file.starts_with("bridge/")
        || file == "cli.rs"
        || file.starts_with("cli/")
        || file == "main.rs"
}

#[test]
fn the_core_mentions_nothing_of_neovim() {
    let mut offending = Vec::new();
    for (file, text) in sources() {
        let file = slashed(&file);
        if is_shell(&file) {
            continue;
        }
        for (number, line) in text.lines().enumerate() {
            for word in SHELL_ONLY {
                if line.contains(word) {
                    offending.push(format!(
                        "src/{file}:{}: the core names `{word}`; word it in the shells \
                         (src/bridge/, src/cli.rs): {}",
                        number + 1,
                        line.trim()
                    ));
                }
            }
        }
    }
    assert!(offending.is_empty(), "{}", offending.join("\n"));
}

const MAX_LINES: usize = 800;

/// TEMPORARY (issue 23): i23-wire splits `dto.rs` into requests, replies and events; the lead
/// deletes this entry at merge.
const TEMPORARY_LONG_FILES: [&str; 1] = ["bridge/dto.rs"];

/// The lines of `text` outside its `#[cfg(test)]` modules (a module in a file of its own, such
/// as `tests.rs`, counts where it is declared, as two lines).
fn lines_outside_tests(text: &str) -> usize {
    let lines: Vec<&str> = text.lines().collect();
    let mut counted = 0;
    let mut index = 0;
    while index < lines.len() {
        let opens_test_module = lines[index].trim_end() == "#[cfg(test)]"
            && lines.get(index + 1).is_some_and(|next| {
                let next = next.trim_end();
                next.contains("mod ") && next.ends_with('{') && !next.starts_with(' ')
            });
        if opens_test_module {
            // Up to the brace that closes it, the first `}` at the start of a line.
            index += 2;
            while index < lines.len() && lines[index].trim_end() != "}" {
                index += 1;
            }
            index += 1;
        } else {
            counted += 1;
            index += 1;
        }
    }
    counted
}

/// Small files with one purpose: no file over 800 lines outside its tests (a file that is all
/// tests, `tests.rs`, is exempt).
#[test]
fn no_source_file_is_over_800_lines_outside_its_tests() {
    let mut long = Vec::new();
    for (file, text) in sources() {
        let file = slashed(&file);
        if file.ends_with("/tests.rs") || TEMPORARY_LONG_FILES.contains(&file.as_str()) {
            continue;
        }
        let lines = lines_outside_tests(&text);
        if lines > MAX_LINES {
            long.push(format!(
                "src/{file}: {lines} lines outside its tests (at most {MAX_LINES}); split it \
                 by purpose"
            ));
        }
    }
    assert!(long.is_empty(), "{}", long.join("\n"));
}

#[test]
fn test_modules_are_not_counted_as_lines() {
    let text =
        "//! Doc.\nfn a() {}\n\n#[cfg(test)]\nmod tests {\n    #[test]\n    fn t() {\n    }\n}\n";
    assert_eq!(lines_outside_tests(text), 3);
    assert_eq!(
        lines_outside_tests("fn a() {}\n#[cfg(test)]\nmod tests;\n"),
        3
    );
}

/// The module path of a source file: `agent/turn.rs` is `agent::turn`, `agent.rs` and
/// `agent/mod.rs` are `agent`, `lib.rs` is the crate root. `main.rs` is its own crate.
fn module_of(file: &Path) -> Option<Vec<String>> {
    let mut parts: Vec<String> = file
        .components()
        .map(|part| part.as_os_str().to_string_lossy().into_owned())
        .collect();
    let last = parts.pop()?;
    let stem = last.strip_suffix(".rs")?;
    match stem {
        "main" if parts.is_empty() => None,
        "lib" if parts.is_empty() => Some(Vec::new()),
        "mod" => Some(parts),
        _ => {
            parts.push(stem.to_owned());
            Some(parts)
        }
    }
}

/// `text` without its `#[cfg(test)]` modules and comments: the code the build compiles.
fn code_outside_tests(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut code = Vec::new();
    let mut index = 0;
    while index < lines.len() {
        if lines[index].trim_end() == "#[cfg(test)]"
            && lines
                .get(index + 1)
                .is_some_and(|next| next.contains("mod ") && !next.starts_with(' '))
        {
            index += 2;
            if lines[index - 1].trim_end().ends_with('{') {
                while index < lines.len() && lines[index].trim_end() != "}" {
                    index += 1;
                }
                index += 1;
            }
            continue;
        }
        code.push(lines[index].split("//").next().unwrap_or(""));
        index += 1;
    }
    code.join("\n")
}

/// The paths a `use` tree names, braces expanded: `a::{b, c::{d, e}}` is `a::b`, `a::c::d`
/// and `a::c::e` (`self` in braces names the path before them).
fn expand_use_tree(tree: &str) -> Vec<String> {
    // `a as b` names `a`: the renaming is dropped, keeping what follows it (`,` or `}`).
    let mut kept = String::new();
    let mut words = tree.split_whitespace();
    while let Some(word) = words.next() {
        if word == "as" {
            let renamed = words.next().unwrap_or_default();
            kept.extend(renamed.chars().filter(|c| matches!(c, ',' | '}')));
        } else {
            kept.push_str(word);
        }
    }
    let tree = kept;
    let Some(open) = tree.find('{') else {
        return vec![tree.trim_end_matches("::self").to_owned()];
    };
    let prefix = &tree[..open];
    let inner = &tree[open + 1..tree.len() - 1];
    let mut items = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (at, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&inner[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    items.push(&inner[start..]);
    items
        .into_iter()
        .filter(|item| !item.is_empty())
        .flat_map(|item| {
            if item == "self" {
                vec![prefix.trim_end_matches("::").to_owned()]
            } else {
                expand_use_tree(&format!("{prefix}{item}"))
            }
        })
        .collect()
}

/// The absolute module path (and item) `path`, written in module `from`, names; `None` for a
/// path into another crate.
fn absolute(path: &str, from: &[String]) -> Option<Vec<String>> {
    let mut parts = path.split("::").filter(|part| !part.is_empty());
    let first = parts.next()?;
    let mut resolved: Vec<String> = match first {
        "crate" => Vec::new(),
        "self" => from.to_vec(),
        "super" => from[..from.len().checked_sub(1)?].to_vec(),
        _ => return None,
    };
    for part in parts {
        if part == "super" {
            resolved.pop()?;
        } else {
            resolved.push(part.to_owned());
        }
    }
    Some(resolved)
}

/// Every module-level `use` and every `crate::`/`super::`/`self::` path in the code of each
/// module, resolved through the `pub use` re-exports of the modules they go through to the
/// module that defines what they name; then, for each folder, the edges between its files
/// (a file stands for the folder below it too). Returns the cycles found, each as the files in
/// the order they import each other.
fn import_cycles(files: &[(PathBuf, String)]) -> Vec<Vec<String>> {
    let use_statement = Regex::new(r"(?m)^(?:pub(?:\([a-z: ]+\))? )?use ([^;]+);").expect("regex");
    let inline_path =
        Regex::new(r"\b(?:crate|super|self)(?:::[A-Za-z_][A-Za-z0-9_]*)+").expect("regex");
    let mut modules: BTreeMap<Vec<String>, String> = BTreeMap::new();
    for (file, text) in files {
        if let Some(module) = module_of(file)
            && !file.ends_with("tests.rs")
        {
            modules.insert(module, code_outside_tests(text));
        }
    }
    // What each module re-exports: a name to the absolute path it stands for.
    let mut exports: BTreeMap<Vec<String>, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    for (module, code) in &modules {
        for statement in use_statement.captures_iter(code) {
            if !statement[0].starts_with("pub") {
                continue;
            }
            for path in expand_use_tree(&statement[1]) {
                let relative_to_module = if path.starts_with("crate")
                    || path.starts_with("super")
                    || path.starts_with("self")
                {
                    path.clone()
                } else {
                    format!("self::{path}")
                };
                if let Some(target) = absolute(&relative_to_module, module)
                    && let Some(name) = target.last()
                {
                    exports
                        .entry(module.clone())
                        .or_default()
                        .insert(name.clone(), target.clone());
                }
            }
        }
    }
    // The module that defines what `path` names: its longest prefix that is a module, through
    // that module's re-exports while the next part is one of them.
    let defining_module = |mut path: Vec<String>| -> Vec<String> {
        for _ in 0..8 {
            let known = (0..=path.len())
                .rev()
                .find(|length| modules.contains_key(&path[..*length]))
                .unwrap_or(0);
            let module = path[..known].to_vec();
            let reexported = path
                .get(known)
                .and_then(|next| exports.get(&module).and_then(|names| names.get(next)));
            match reexported {
                Some(target) if *target != path[..=known] => {
                    let mut through = target.clone();
                    through.extend(path[known + 1..].iter().cloned());
                    path = through;
                }
                _ => return module,
            }
        }
        path
    };
    // Edges between sibling modules, per folder (the folder's own module path).
    let mut edges: BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (module, code) in &modules {
        let mut paths: Vec<String> = use_statement
            .captures_iter(code)
            .flat_map(|statement| expand_use_tree(&statement[1]))
            .collect();
        paths.extend(
            inline_path
                .find_iter(code)
                .map(|found| found.as_str().to_owned()),
        );
        for path in paths {
            let Some(target) = absolute(&path, module) else {
                continue;
            };
            let target = defining_module(target);
            let common = module
                .iter()
                .zip(&target)
                .take_while(|(a, b)| a == b)
                .count();
            // Siblings below the same folder: neither is the folder or above it.
            if common < module.len() && common < target.len() {
                edges
                    .entry(module[..common].to_vec())
                    .or_default()
                    .entry(module[common].clone())
                    .or_default()
                    .insert(target[common].clone());
            }
        }
    }
    let mut cycles = Vec::new();
    for (folder, graph) in &edges {
        let mut reported: BTreeSet<BTreeSet<String>> = BTreeSet::new();
        for start in graph.keys() {
            // The shortest way back to `start`, breadth first.
            let mut came_from: BTreeMap<String, String> = BTreeMap::new();
            let mut queue = std::collections::VecDeque::from([start.clone()]);
            let mut closed = None;
            while let Some(at) = queue.pop_front() {
                for next in graph.get(&at).into_iter().flatten() {
                    if next == start {
                        closed = Some(at.clone());
                        break;
                    }
                    if !came_from.contains_key(next) {
                        came_from.insert(next.clone(), at.clone());
                        queue.push_back(next.clone());
                    }
                }
                if closed.is_some() {
                    break;
                }
            }
            let Some(mut at) = closed else { continue };
            let mut cycle = vec![at.clone()];
            while at != *start {
                at = came_from[&at].clone();
                cycle.push(at.clone());
            }
            cycle.reverse();
            if reported.insert(cycle.iter().cloned().collect()) {
                let place = |name: &String| {
                    let mut path = folder.clone();
                    path.push(name.clone());
                    path.join("/")
                };
                let mut named: Vec<String> = cycle.iter().map(place).collect();
                named.push(place(start));
                cycles.push(named);
            }
        }
    }
    cycles
}

/// The files of one folder form layers: none imports, through any chain, one that imports it
/// back. (A cycle makes neither understandable, nor testable, without the other.)
#[test]
fn the_files_of_a_folder_import_each_other_without_cycles() {
    let problems: Vec<String> = import_cycles(&sources())
        .iter()
        .map(|cycle| {
            format!(
                "import cycle: {}; move what both need into a module of its own that they \
                 both use",
                cycle.join(" -> ")
            )
        })
        .collect();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn import_cycles_are_found_through_re_exports_and_inline_paths() {
    let file = |path: &str, text: &str| (PathBuf::from(path), text.to_owned());
    let files = [
        file("lib.rs", "mod a;\n"),
        file("a.rs", "mod x;\nmod y;\nmod z;\npub use z::Thing;\n"),
        file("a/x.rs", "use super::y::Helper;\n"),
        file("a/y.rs", "fn f() { super::Thing::new(); }\n"),
        file(
            "a/z.rs",
            "use crate::a::{x::{self as renamed}, Other};\npub struct Thing;\n",
        ),
    ];
    assert_eq!(
        import_cycles(&files),
        vec![vec!["a/x", "a/y", "a/z", "a/x"]]
    );
    let layered = [
        file("lib.rs", "mod a;\n"),
        file("a.rs", "mod x;\nmod y;\n"),
        file("a/x.rs", "use super::y::Helper;\n"),
        file(
            "a/y.rs",
            "#[cfg(test)]\nmod tests {\n    use super::super::x;\n}\n",
        ),
    ];
    assert!(import_cycles(&layered).is_empty());
}

/// `ARCHITECTURE.md` is a map a newcomer reads in five minutes, and a true one: short, every
/// path it names exists, and every module of `src/` and every Lua module has its place in it.
#[test]
fn the_architecture_map_is_short_and_true() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let map = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("read ARCHITECTURE.md");
    let lines = map.lines().count();
    assert!(
        lines <= 200,
        "ARCHITECTURE.md has {lines} lines; keep it a map of at most 200"
    );

    let named: Vec<&str> = map
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|span| {
            [
                "src/", "lua/", "plugin/", "tests/", "scripts/", "benches/", "doc/",
            ]
            .iter()
            .any(|top| span.starts_with(top))
        })
        .collect();
    let missing: Vec<&&str> = named
        .iter()
        .filter(|path| !root.join(path.trim_end_matches('/')).exists())
        .collect();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names paths that do not exist: {missing:?}"
    );

    let mut modules = Vec::new();
    for entry in std::fs::read_dir(root.join("src")).expect("read src") {
        let path = entry.expect("entry").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_owned();
        if path.is_dir() {
            modules.push(format!("src/{name}"));
        } else if name.ends_with(".rs") && !["lib.rs", "test_support.rs"].contains(&name.as_str()) {
            let directory = root.join("src").join(name.trim_end_matches(".rs"));
            if !directory.is_dir() {
                modules.push(format!("src/{name}"));
            }
        }
    }
    for entry in std::fs::read_dir(root.join("lua/loopr")).expect("read lua/loopr") {
        let path = entry.expect("entry").path();
        if let Some(name) = path.file_name().and_then(|n| n.to_str()) {
            modules.push(name.to_owned());
        }
    }
    let unmapped: Vec<&String> = modules
        .iter()
        .filter(|module| !map.contains(&format!("`{module}")))
        .collect();
    assert!(
        unmapped.is_empty(),
        "ARCHITECTURE.md does not place these modules: {unmapped:?}"
    );
}
