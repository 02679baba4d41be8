//! The `:Loopr*` commands come from one table, `lua/loopr/commands.lua`: Neovim defines
//! exactly its commands, with the arguments it says, and `:help loopr-commands` documents each
//! of them, and no other, with those arguments.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::fake_llm::FakeLlm;
use crate::scenario::start_editor;

/// A command's name and the shape of its arguments: `nargs` as `:command` has it (`0`, `?`,
/// `+`), and whether it takes a `!`.
#[derive(Debug, Deserialize, PartialEq, Eq, Clone)]
struct Shape {
    nargs: String,
    bang: bool,
}

/// The text of the section of `doc/loopr.txt` tagged `*tag*`, up to the next section.
fn help_section<'doc>(doc: &'doc str, tag: &str) -> &'doc str {
    doc.split_once(&format!("*{tag}*"))
        .map(|(_, rest)| rest)
        .and_then(|rest| rest.split("\n=====").next())
        .unwrap_or_else(|| panic!("doc/loopr.txt has a *{tag}* section"))
}

/// The commands `doc/loopr.txt` documents in its commands section, from the line each
/// starts with: `:LooprUndo[!] [phase]` is `LooprUndo` with an optional argument and a `!`.
fn documented_commands(doc: &str) -> BTreeMap<String, Shape> {
    let section = help_section(doc, "loopr-commands");
    let mut documented = BTreeMap::new();
    for line in section.lines().filter(|line| line.starts_with(":Loopr")) {
        let (head, arguments) = line[1..].split_once(' ').unwrap_or((&line[1..], ""));
        let (name, bang) = match head.strip_suffix("[!]") {
            Some(name) => (name, true),
            None => (head, false),
        };
        assert!(
            section.contains(&format!("*:{name}*")),
            ":{name} has no help tag:\n{line}"
        );
        let nargs = match arguments.trim().chars().next() {
            None => "0",
            Some('[') => "?",
            Some('{') => "+",
            Some(_) => panic!("arguments of :{name} neither [optional] nor {{required}}: {line}"),
        };
        let shape = Shape {
            nargs: nargs.to_owned(),
            bang,
        };
        assert!(
            documented.insert(name.to_owned(), shape).is_none(),
            ":{name} is documented twice"
        );
    }
    documented
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_in_the_table_is_defined_and_documented_and_no_other() {
    let fake = FakeLlm::start().await;
    let editor = start_editor(&fake, "{}").await;
    let table: BTreeMap<String, Shape> = editor
        .lua(
            "local shapes = {}
             for _, command in ipairs(require('loopr.commands')) do
               shapes[command.name] = { nargs = tostring(command.nargs), bang = command.bang == true }
             end
             return shapes",
        )
        .await;
    let defined: BTreeMap<String, Shape> = editor
        .lua(
            "local shapes = {}
             for name, command in pairs(vim.api.nvim_get_commands({})) do
               if name:match('^Loopr') then
                 shapes[name] = { nargs = command.nargs, bang = command.bang }
               end
             end
             return shapes",
        )
        .await;
    assert!(table.len() >= 13, "{table:?}");
    assert_eq!(
        defined, table,
        "plugin/loopr.lua defines the table's commands"
    );

    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/doc/loopr.txt"))
        .expect("doc/loopr.txt");
    assert_eq!(
        documented_commands(&doc),
        table,
        "|loopr-commands| documents every command of lua/loopr/commands.lua, as it takes its \
         arguments, and no other"
    );
    editor.quit().await;
}

/// The names in each lazy.nvim `cmd = { … }` list of `text`.
fn lazy_command_lists(text: &str) -> Vec<std::collections::BTreeSet<String>> {
    text.split("cmd = {")
        .skip(1)
        .map(|rest| {
            rest.split('}')
                .next()
                .unwrap_or_default()
                .split(',')
                .map(|name| name.trim().trim_matches('"').to_owned())
                .filter(|name| !name.is_empty())
                .collect()
        })
        .collect()
}

/// `:help loopr-installation` and the README install Loopr the same way (`lazy = false`, so
/// unfinished loops resume at startup), and a `cmd` list for lazy-loading names every command
/// of `lua/loopr/commands.lua`, so none is missing until another one loads the plugin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_installation_examples_agree_and_lazy_load_on_every_command() {
    let fake = FakeLlm::start().await;
    let editor = start_editor(&fake, "{}").await;
    let names: std::collections::BTreeSet<String> = editor
        .lua::<Vec<String>>(
            "return vim.tbl_map(function(command) return command.name end, require('loopr.commands'))",
        )
        .await
        .into_iter()
        .collect();
    editor.quit().await;
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/doc/loopr.txt"))
        .expect("doc/loopr.txt");
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let installation = help_section(&doc, "loopr-installation");
    assert!(readme.contains("lazy = false,"), "the README's example");
    let example = installation.split("\n<").next().unwrap_or_default();
    assert!(
        example.contains("lazy = false,"),
        "the help's lazy.nvim example loads as the README's does:\n{example}"
    );
    for list in lazy_command_lists(installation)
        .into_iter()
        .chain(lazy_command_lists(&readme))
    {
        assert_eq!(list, names, "a `cmd` list names every command");
    }
}

/// `:LooprPlan` without a task says what to type, not a bare `E471: Argument required`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_without_a_task_shows_its_usage() {
    let fake = FakeLlm::start().await;
    let editor = start_editor(&fake, "{}").await;
    let outcome: serde_json::Value = editor
        .lua(
            "vim.cmd('messages clear')
             local ok, err = pcall(vim.cmd, 'LooprPlan')
             return { ok = ok, err = ok and vim.NIL or tostring(err) }",
        )
        .await;
    assert_eq!(outcome["ok"], true, "no Vim error: {outcome}");
    let shown = editor
        .lua::<String>(
            "vim.wait(1000, function() return vim.fn.execute('messages'):find('LooprPlan') ~= nil end)
             return vim.fn.execute('messages')",
        )
        .await;
    assert!(
        shown.contains("Loopr: usage: :LooprPlan {task}, e.g. :LooprPlan Add a --version flag"),
        "{shown}"
    );
}
