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

/// The commands `doc/loopr.txt` documents in its commands section, from the line each
/// starts with: `:LooprUndo[!] [phase]` is `LooprUndo` with an optional argument and a `!`.
fn documented_commands(doc: &str) -> BTreeMap<String, Shape> {
    let section = doc
        .split_once("*loopr-commands*")
        .map(|(_, rest)| rest)
        .and_then(|rest| rest.split("\n=====").next())
        .expect("doc/loopr.txt has a *loopr-commands* section");
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
