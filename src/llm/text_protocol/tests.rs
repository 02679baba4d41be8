//! Tests of the text protocol: answers parse as the rules say, and its messages name the
//! problem, the text and the fix.

use serde_json::{Value, json};

use super::*;
use crate::llm::{ToolFormat, ToolProtocol, ToolSpec};

fn tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: "read_file".to_owned(),
            description: "Reads a file of the project.".to_owned(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "start_line": {"type": ["integer", "null"]}
                },
                "required": ["path"],
                "additionalProperties": false
            }),
            example: None,
        },
        ToolSpec {
            name: "write_file".to_owned(),
            description: "Writes a whole file.".to_owned(),
            input_schema: json!({
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                "required": ["path", "content"],
                "additionalProperties": false
            }),
            example: None,
        },
        ToolSpec {
            name: "configure".to_owned(),
            description: "Sets options.".to_owned(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "country": {"type": "string"},
                    "switch": {"type": "string"},
                    "version": {"type": "string"},
                    "code": {"type": "string"},
                    "enabled": {"type": "boolean"},
                    "count": {"type": "integer"}
                },
                "additionalProperties": false
            }),
            example: None,
        },
    ]
}

fn protocol(protocol: ToolProtocol, format: ToolFormat) -> TextProtocol {
    TextProtocol::new(protocol, format).expect("a text protocol")
}

const XML: (ToolProtocol, ToolFormat) = (ToolProtocol::Xml, ToolFormat::Json);
const XML_YAML: (ToolProtocol, ToolFormat) = (ToolProtocol::Xml, ToolFormat::Yaml);
const MD: (ToolProtocol, ToolFormat) = (ToolProtocol::Markdown, ToolFormat::Json);
const MD_YAML: (ToolProtocol, ToolFormat) = (ToolProtocol::Markdown, ToolFormat::Yaml);
const TC: (ToolProtocol, ToolFormat) = (ToolProtocol::ToolCalls, ToolFormat::Json);

struct Case {
    name: &'static str,
    protocol: (ToolProtocol, ToolFormat),
    text: &'static str,
    calls: Vec<(&'static str, Value)>,
    answer: Option<&'static str>,
    issues: Vec<IssueKind>,
}

fn case(
    name: &'static str,
    protocol: (ToolProtocol, ToolFormat),
    text: &'static str,
    calls: Vec<(&'static str, Value)>,
    answer: Option<&'static str>,
    issues: Vec<IssueKind>,
) -> Case {
    Case {
        name,
        protocol,
        text,
        calls,
        answer,
        issues,
    }
}

fn read(path: &str) -> (&'static str, Value) {
    ("read_file", json!({ "path": path }))
}

#[test]
fn answers_parse_as_the_rules_say() {
    use IssueKind::*;
    let cases = vec![
        // xml sections
        case(
            "xml: a call and nothing else",
            XML,
            r#"<action>{"tool": "read_file", "args": {"path": "a.rs"}}</action>"#,
            vec![read("a.rs")],
            None,
            vec![],
        ),
        case(
            "xml: a literal tag in the thinking is content",
            XML,
            "<thinking>I will answer in <answer> tags, or call in <action>.</thinking>\n\
             <answer>Done.</answer>",
            vec![],
            Some("Done."),
            vec![],
        ),
        case(
            "xml: section names are case-insensitive",
            XML,
            "<THINKING>hm</Thinking><Action>{\"tool\": \"read_file\", \"args\": {\"path\": \"b\"}}</ACTION>",
            vec![read("b")],
            None,
            vec![],
        ),
        case(
            "xml: calls of every action section, in order",
            XML,
            "<action>{\"tool\": \"read_file\", \"args\": {\"path\": \"1\"}}</action>\n\
             <thinking>and</thinking>\n\
             <action>[{\"tool\": \"read_file\", \"args\": {\"path\": \"2\"}},\n\
              {\"tool\": \"read_file\", \"args\": {\"path\": \"3\"}}]</action>",
            vec![read("1"), read("2"), read("3")],
            None,
            vec![],
        ),
        case(
            "xml: text before the first section is ignored",
            XML,
            "Sure! Here is my answer: {\"tool\": \"read_file\"}\n<answer>Hello</answer>",
            vec![],
            Some("Hello"),
            vec![],
        ),
        case(
            "xml: a tag inside a fenced code block is content",
            XML,
            "<answer>Use this:\n\n```\n</answer>\n<action>\n```\n\nThat is all.</answer>",
            vec![],
            Some("Use this:\n\n```\n</answer>\n<action>\n```\n\nThat is all."),
            vec![],
        ),
        case(
            "xml: a ```json fence around the calls is fine",
            XML,
            "<action>\n```json\n{\"tool\": \"read_file\", \"args\": {\"path\": \"f\"}}\n```\n</action>",
            vec![read("f")],
            None,
            vec![],
        ),
        case(
            "xml: an unclosed action is reported, its call not run",
            XML,
            "<action>{\"tool\": \"read_file\", \"args\": {\"path\": \"a\"}}",
            vec![],
            None,
            vec![UnclosedSection],
        ),
        case(
            "xml: an unclosed thinking hides what follows",
            XML,
            "<thinking>let me see\n<answer>42</answer>",
            vec![],
            None,
            vec![UnclosedSection],
        ),
        case(
            "xml: a <think> wrapper is never read for calls",
            XML,
            "<think><action>{\"tool\": \"write_file\", \"args\": {}}</action></think>\
             <answer>ok</answer>",
            vec![],
            Some("ok"),
            vec![],
        ),
        case(
            "xml: reasoning closed by </think> without its opening tag is skipped",
            XML,
            "I should call <action>{\"tool\": \"nope\"}</action> maybe.</think>\n<answer>fine</answer>",
            vec![],
            Some("fine"),
            vec![],
        ),
        case(
            "xml: a made-up observation and answer after the call are dropped",
            XML,
            "<action>{\"tool\": \"read_file\", \"args\": {\"path\": \"a\"}}</action>\n\
             <observation>fn main() {}</observation>\n<answer>The file is empty.</answer>",
            vec![read("a")],
            None,
            vec![],
        ),
        case(
            "xml: an answer before the calls is kept",
            XML,
            "<answer>Reading it.</answer><action>{\"tool\": \"read_file\", \"args\": {\"path\": \"a\"}}</action>Result: x",
            vec![read("a")],
            Some("Reading it."),
            vec![],
        ),
        case(
            "xml: no sections at all",
            XML,
            "The answer is 42.",
            vec![],
            None,
            vec![NoSections],
        ),
        case(
            "xml: only thinking",
            XML,
            "<thinking>hmm</thinking>",
            vec![],
            None,
            vec![NothingToDo],
        ),
        case(
            "xml: an empty action",
            XML,
            "<action>  </action>",
            vec![],
            None,
            vec![EmptyCall],
        ),
        // calls
        case(
            "json: empty tool name",
            XML,
            "<action>{\"tool\": \"\", \"args\": {\"path\": \"a\"}}</action>",
            vec![],
            None,
            vec![EmptyName],
        ),
        case(
            "json: unknown tool",
            XML,
            "<action>{\"tool\": \"delete_everything\", \"args\": {}}</action>",
            vec![],
            None,
            vec![UnknownTool],
        ),
        case(
            "json: a missing required argument",
            XML,
            "<action>{\"tool\": \"write_file\", \"args\": {\"path\": \"a\"}}</action>",
            vec![],
            None,
            vec![InvalidArguments],
        ),
        case(
            "json: the valid call of two is returned, the invalid one reported",
            XML,
            "<action>[{\"tool\": \"read_file\", \"args\": {\"path\": \"a\"}},\
             {\"tool\": \"read_file\", \"args\": {\"path\": 5}}]</action>",
            vec![read("a")],
            None,
            vec![InvalidArguments],
        ),
        case(
            "json: a wrong key",
            XML,
            "<action>{\"tool\": \"read_file\", \"arguments\": {\"path\": \"a\"}}</action>",
            vec![],
            None,
            vec![UnexpectedKey],
        ),
        case(
            "json: arguments encoded as a string",
            XML,
            "<action>{\"tool\": \"read_file\", \"args\": \"{\\\"path\\\": \\\"a\\\"}\"}</action>",
            vec![],
            None,
            vec![InvalidArguments],
        ),
        case(
            "json: broken JSON",
            XML,
            "<action>{\"tool\": \"read_file\", \"args\": {\"path\": \"a\",}}</action>",
            vec![],
            None,
            vec![Syntax],
        ),
        case(
            "json: not an object",
            XML,
            "<action>[\"read_file\"]</action>",
            vec![],
            None,
            vec![NotACall],
        ),
        // markdown
        case(
            "markdown: headers of any case and level",
            MD,
            "# thinking\nfirst\n## ACTION\n{\"tool\": \"read_file\", \"args\": {\"path\": \"a\"}}",
            vec![read("a")],
            None,
            vec![],
        ),
        case(
            "markdown: a header inside a fence is content",
            MD,
            "Intro ignored.\n# Answer\nWrite this:\n\n```md\n# Action\n{\"tool\": \"read_file\"}\n```\n",
            vec![],
            Some("Write this:\n\n```md\n# Action\n{\"tool\": \"read_file\"}\n```"),
            vec![],
        ),
        case(
            "markdown: several action sections, fenced calls",
            MD,
            "# Action\n```json\n{\"tool\": \"read_file\", \"args\": {\"path\": \"1\"}}\n```\n\
             # Thinking\nmore\n# Action\n```json\n{\"tool\": \"read_file\", \"args\": {\"path\": \"2\"}}\n```\n\
             # Answer\nmade up",
            vec![read("1"), read("2")],
            None,
            vec![],
        ),
        case(
            "markdown: an unclosed fence is a cut-off call",
            MD,
            "# Action\n```json\n{\"tool\": \"read_file\", \"args\": {\"path\": \"1\"}}\n",
            vec![],
            None,
            vec![UnclosedFence],
        ),
        case(
            "markdown: <think> is never read",
            MD,
            "<think>\n# Action\n{\"tool\": \"read_file\", \"args\": {\"path\": \"x\"}}\n</think>\n# Answer\nok",
            vec![],
            Some("ok"),
            vec![],
        ),
        case(
            "markdown: an unclosed <think> is reported",
            MD,
            "<think>\n# Answer\nok",
            vec![],
            None,
            vec![UnclosedSection],
        ),
        // yaml
        case(
            "yaml: strings keep their text where the schema says string",
            XML_YAML,
            "<action>\ntool: configure\nargs:\n  country: no\n  switch: on\n  version: 1.10\n  code: 007\n  enabled: true\n  count: 12\n</action>",
            vec![(
                "configure",
                json!({"country": "no", "switch": "on", "version": "1.10", "code": "007", "enabled": true, "count": 12}),
            )],
            None,
            vec![],
        ),
        case(
            "yaml: block scalars",
            MD_YAML,
            "# Action\n```yaml\ntool: write_file\nargs:\n  path: a.txt\n  content: |\n    line one\n      indented: yes # not a comment\n```\n\
             # Action\ntool: write_file\nargs:\n  path: b.txt\n  content: >-\n    folded\n    text\n",
            vec![
                (
                    "write_file",
                    json!({"path": "a.txt", "content": "line one\n  indented: yes # not a comment\n"}),
                ),
                (
                    "write_file",
                    json!({"path": "b.txt", "content": "folded text"}),
                ),
            ],
            None,
            vec![],
        ),
        case(
            "yaml: a list of calls",
            XML_YAML,
            "<action>\n- tool: read_file\n  args:\n    path: a\n- tool: read_file\n  args:\n    path: b\n    start_line: 3\n</action>",
            vec![
                read("a"),
                ("read_file", json!({"path": "b", "start_line": 3})),
            ],
            None,
            vec![],
        ),
        case(
            "yaml: a value that is not of its field's type is named",
            XML_YAML,
            "<action>\ntool: configure\nargs:\n  enabled: yes\n</action>",
            vec![],
            None,
            vec![InvalidArguments],
        ),
        case(
            "yaml: broken YAML",
            XML_YAML,
            "<action>\ntool: read_file\nargs:\n  path: [a\n</action>",
            vec![],
            None,
            vec![Syntax],
        ),
        case(
            "yaml: aliases are refused",
            XML_YAML,
            "<action>\ntool: read_file\nargs: &a\n  path: *a\n</action>",
            vec![],
            None,
            vec![Unsupported],
        ),
        // tool_calls
        case(
            "tool_calls: commentary and calls",
            TC,
            "I will read two files.\n\n## Tool Calls\n\n```json\n{\"uid\": \"r1\", \"name\": \"read_file\", \"arguments\": {\"path\": \"a\"}}\n```\n\n\
             ```json\n{\"uid\": \"r2\", \"name\": \"read_file\", \"arguments\": {\"path\": \"b\"}}\n```\n\
             Result: both files are empty.",
            vec![read("a"), read("b")],
            Some("I will read two files."),
            vec![],
        ),
        case(
            "tool_calls: no heading means a plain answer",
            TC,
            "The answer is 42.\n\n```json\n{\"name\": \"read_file\"}\n```",
            vec![],
            Some("The answer is 42.\n\n```json\n{\"name\": \"read_file\"}\n```"),
            vec![],
        ),
        case(
            "tool_calls: empty name, unknown tool, missing argument",
            TC,
            "## tool calls\n```json\n{\"uid\": \"1\", \"name\": \"\", \"arguments\": {}}\n```\n\
             ```json\n{\"uid\": \"2\", \"name\": \"rm\", \"arguments\": {}}\n```\n\
             ```json\n{\"uid\": \"3\", \"name\": \"read_file\", \"arguments\": {}}\n```",
            vec![],
            None,
            vec![EmptyName, UnknownTool, InvalidArguments],
        ),
        case(
            "tool_calls: a heading without blocks",
            TC,
            "Let me look.\n## Tool Calls\nread_file a.rs",
            vec![],
            Some("Let me look."),
            vec![NoCallBlocks],
        ),
        case(
            "tool_calls: a fence inside <thinking> is never read",
            TC,
            "<thinking>\n## Tool Calls\n```json\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"x\"}}\n```\n</thinking>\nNo tools needed.",
            vec![],
            Some("No tools needed."),
            vec![],
        ),
        case(
            "tool_calls: a cut-off block",
            TC,
            "## Tool Calls\n```json\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"x\"}}",
            vec![],
            None,
            vec![UnclosedFence],
        ),
        case(
            "tool_calls: a repeated uid",
            TC,
            "## Tool Calls\n```json\n{\"uid\": \"a\", \"name\": \"read_file\", \"arguments\": {\"path\": \"1\"}}\n```\n\
             ```json\n{\"uid\": \"a\", \"name\": \"read_file\", \"arguments\": {\"path\": \"2\"}}\n```",
            vec![read("1")],
            None,
            vec![DuplicateUid],
        ),
    ];
    let tools = tools();
    let mut failures = Vec::new();
    for case in &cases {
        let parsed = parse(
            &protocol(case.protocol.0, case.protocol.1),
            case.text,
            &tools,
        );
        let calls: Vec<(&str, &Value)> = parsed
            .calls
            .iter()
            .map(|call| (call.name.as_str(), &call.input))
            .collect();
        let expected_calls: Vec<(&str, &Value)> = case
            .calls
            .iter()
            .map(|(name, input)| (*name, input))
            .collect();
        let kinds: Vec<IssueKind> = parsed.issues.iter().map(|issue| issue.kind).collect();
        if calls != expected_calls
            || parsed.answer.as_deref() != case.answer
            || kinds != case.issues
        {
            failures.push(format!(
                "{}:\n  calls {calls:?}\n  answer {:?}\n  issues {:#?}",
                case.name, parsed.answer, parsed.issues
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn parse_one(p: (ToolProtocol, ToolFormat), text: &str) -> ParsedAnswer {
    parse(&protocol(p.0, p.1), text, &tools())
}

#[test]
fn made_up_ids_are_unique_and_given_uids_kept() {
    let parsed = parse_one(
        TC,
        "## Tool Calls\n```json\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"1\"}}\n```\n\
         ```json\n{\"uid\": \"call_1\", \"name\": \"read_file\", \"arguments\": {\"path\": \"2\"}}\n```\n\
         ```json\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"3\"}}\n```",
    );
    let ids: Vec<&str> = parsed.calls.iter().map(|call| call.id.as_str()).collect();
    assert_eq!(ids, ["call_2", "call_1", "call_3"], "{parsed:#?}");
    let xml = parse_one(
        XML,
        "<action>[{\"tool\": \"read_file\", \"args\": {\"path\": \"1\"}},\
         {\"tool\": \"read_file\", \"args\": {\"path\": \"2\"}}]</action>",
    );
    let ids: Vec<&str> = xml.calls.iter().map(|call| call.id.as_str()).collect();
    assert_eq!(ids, ["call_1", "call_2"]);
}

#[test]
fn messages_name_the_problem_the_text_and_the_fix() {
    let unknown = parse_one(XML, "<action>{\"tool\": \"rm\", \"args\": {}}</action>");
    assert_eq!(
        unknown.issues[0].to_string(),
        "there is no tool named \"rm\": `{\"args\":{},\"tool\":\"rm\"}`. call one of the tools \
         there are: read_file, write_file, configure"
    );
    let missing = parse_one(
        XML,
        "<action>{\"tool\": \"write_file\", \"args\": {\"path\": \"a\"}}</action>",
    );
    let message = missing.issues[0].to_string();
    assert!(
        message.contains("\"content\" is a required property"),
        "{message}"
    );
    assert!(message.contains("write_file"), "{message}");
    let typed = parse_one(
        XML_YAML,
        "<action>\ntool: configure\nargs:\n  count: many\n</action>",
    );
    let message = typed.issues[0].to_string();
    assert!(
        message.contains("count: `many` is not an integer"),
        "{message}"
    );
    let unclosed = parse_one(XML, "<answer>The file has 300 lines and");
    let message = unclosed.issues[0].to_string();
    assert!(message.starts_with("<answer> is never closed"), "{message}");
    assert!(
        message.contains("`<answer>The file has 300 lines and`"),
        "{message}"
    );
    assert!(
        message.ends_with("close it with </answer> where it ends"),
        "{message}"
    );
    let long = parse_one(
        XML,
        &format!("<action>{{\"tool\": \"{}\"}}</action>", "x".repeat(200)),
    );
    let quote = long.issues[0].quote.as_deref().unwrap_or_default();
    assert!(
        quote.chars().count() <= 81 && quote.ends_with('…'),
        "{quote}"
    );
}

#[test]
fn feedback_lists_every_issue_numbered() {
    let p = protocol(ToolProtocol::Xml, ToolFormat::Json);
    let parsed = parse(
        &p,
        "<action>[{\"tool\": \"rm\"}, {\"tool\": \"\"}]</action>",
        &tools(),
    );
    let text = feedback(&p, &parsed.issues);
    assert!(text.starts_with("Your last reply could not be used as written (2 problems):\n1. there is no tool named \"rm\""), "{text}");
    assert!(text.contains("\n2. a call names no tool"), "{text}");
    assert!(text.contains("<action>...</action>"), "{text}");
}

#[test]
fn native_is_not_a_text_protocol() {
    assert!(TextProtocol::new(ToolProtocol::Native, ToolFormat::Json).is_none());
    let p = protocol(ToolProtocol::ToolCalls, ToolFormat::Yaml);
    assert_eq!(p.format(), ToolFormat::Json);
}

fn every_protocol() -> Vec<TextProtocol> {
    let mut all = Vec::new();
    for protocol in [ToolProtocol::Xml, ToolProtocol::Markdown] {
        for format in ToolFormat::ALL {
            all.push(TextProtocol::new(protocol, format).expect("text"));
        }
    }
    all.push(TextProtocol::new(ToolProtocol::ToolCalls, ToolFormat::Json).expect("text"));
    all
}

#[test]
fn instructions_show_every_tool_with_an_example_that_parses() {
    let mut tools = tools();
    tools.push(ToolSpec {
        name: "search".to_owned(),
        description: "Searches the code.".to_owned(),
        input_schema: json!({
            "type": "object",
            "properties": {"pattern": {"type": "string"}, "limit": {"type": "integer"}},
            "required": ["pattern"],
            "examples": [{"pattern": "fn main", "limit": 5}]
        }),
        example: None,
    });
    for p in every_protocol() {
        let text = instructions(&p, &tools);
        for tool in &tools {
            assert!(
                text.contains(&format!("\"name\":\"{}\"", tool.name)),
                "{text}"
            );
            assert!(
                text.contains(&format!("\"description\":\"{}\"", tool.description)),
                "{text}"
            );
            assert!(
                text.contains(&format!("\"parameters\":{}", tool.input_schema)),
                "{text}"
            );
            let example_start = text
                .find(&format!("\"name\":\"{}\"", tool.name))
                .and_then(|at| text[at..].find("Example:\n").map(|offset| at + offset + 9))
                .expect("an example for every tool");
            let example_end = text[example_start..]
                .find("\n\n{")
                .map_or(text.len(), |offset| example_start + offset);
            let example = &text[example_start..example_end];
            let parsed = parse(&p, example, &tools);
            assert!(
                parsed.issues.is_empty(),
                "{p:?}: {example}\n{:#?}",
                parsed.issues
            );
            assert_eq!(parsed.calls.len(), 1, "{p:?}: {example}");
            assert_eq!(parsed.calls[0].name, tool.name);
            assert!(
                !parsed.calls[0].input.to_string().contains('<'),
                "a made-up value is no <placeholder>, which the xml protocol reads as a tag: \
                 {example}"
            );
            if tool.name == "search" {
                assert_eq!(
                    parsed.calls[0].input,
                    json!({"pattern": "fn main", "limit": 5})
                );
            }
        }
    }
}

#[test]
fn the_instructions_spell_what_the_parser_reads() {
    let xml = instructions(&protocol(ToolProtocol::Xml, ToolFormat::Json), &[]);
    for tag in [
        "<thinking>...</thinking>",
        "<action>...</action>",
        "<answer>...</answer>",
        "{\"tool\": NAME, \"args\": {...}}",
    ] {
        assert!(xml.contains(tag), "{xml}");
    }
    let markdown = instructions(&protocol(ToolProtocol::Markdown, ToolFormat::Yaml), &[]);
    for header in [
        "`# Thinking`",
        "`# Action`",
        "`# Answer`",
        "`tool: NAME` and `args:`",
    ] {
        assert!(markdown.contains(header), "{markdown}");
    }
    let tool_calls = instructions(&protocol(ToolProtocol::ToolCalls, ToolFormat::Json), &[]);
    assert!(tool_calls.contains("`## Tool Calls`"), "{tool_calls}");
    assert!(
        tool_calls.contains("{\"uid\": ID, \"name\": NAME, \"arguments\": {...}}"),
        "{tool_calls}"
    );
}

mod termination {
    use schemars::JsonSchema;
    use serde::Deserialize;

    use super::super::{IssueKind, JsonTermination};

    #[derive(Debug, Deserialize, JsonSchema, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Verdict {
        passed: bool,
        reasons: Vec<String>,
    }

    #[test]
    fn a_typed_answer_is_read_or_its_problems_named() {
        let termination = JsonTermination::<Verdict>::new();
        let instructions = termination.instructions();
        assert!(instructions.contains("\"passed\""), "{instructions}");
        assert!(instructions.contains("Example:\n{"), "{instructions}");
        assert_eq!(
            termination.parse("```json\n{\"passed\": true, \"reasons\": [\"ok\"]}\n```"),
            Ok(Verdict {
                passed: true,
                reasons: vec!["ok".to_owned()]
            })
        );
        let issues = termination
            .parse("{\"passed\": \"yes\"}")
            .expect_err("invalid");
        let kinds: Vec<IssueKind> = issues.iter().map(|issue| issue.kind).collect();
        assert_eq!(kinds, [IssueKind::InvalidAnswer, IssueKind::InvalidAnswer]);
        let messages: Vec<String> = issues.iter().map(ToString::to_string).collect();
        assert!(
            messages
                .iter()
                .any(|m| m.contains("\"reasons\" is a required property")),
            "{messages:?}"
        );
        assert!(
            messages
                .iter()
                .any(|m| m.contains("at passed") && m.contains("is not of type \"boolean\"")),
            "{messages:?}"
        );
        let broken = termination.parse("passed: yes").expect_err("not json");
        assert_eq!(broken[0].kind, IssueKind::Syntax);
    }
}

mod properties {
    use proptest::prelude::*;
    use serde_json::{Map, Value, json};

    use super::super::*;
    use super::every_protocol;
    use crate::llm::ToolSpec;

    fn family() -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "edit".to_owned(),
            description: "A tool of every shape.".to_owned(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "text": {"type": "string"},
                    "count": {"type": "integer"},
                    "flag": {"type": "boolean"},
                    "nested": {
                        "type": "object",
                        "properties": {
                            "label": {"type": "string"},
                            "lines": {"type": "array", "items": {"type": "string"}}
                        }
                    },
                    "numbers": {"type": "array", "items": {"type": "integer"}}
                },
                "required": ["text"],
                "additionalProperties": false
            }),
            example: None,
        }]
    }

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("no".to_owned()),
            Just("on".to_owned()),
            Just("1.10".to_owned()),
            Just("007".to_owned()),
            Just(String::new()),
            Just("null".to_owned()),
            Just("</action>\n<answer>x</answer>".to_owned()),
            Just("```\n# Action\n```".to_owned()),
            Just("  leading\nspaces\n\n".to_owned()),
            "[a-zA-Z0-9 :#'\"{}\\[\\],.|>*&!%@`-]{0,20}",
            "([a-z ]{0,8}(\n|\t|: |# |\\\\|é|</|<think>|```)?){0,6}",
            any::<String>(),
        ]
    }

    fn arguments() -> impl Strategy<Value = Value> {
        (
            text(),
            proptest::option::of(any::<i64>()),
            proptest::option::of(any::<bool>()),
            proptest::option::of((text(), proptest::collection::vec(text(), 0..3))),
            proptest::option::of(proptest::collection::vec(any::<i32>(), 0..4)),
        )
            .prop_map(|(text, count, flag, nested, numbers)| {
                let mut args = Map::new();
                args.insert("text".to_owned(), json!(text));
                if let Some(count) = count {
                    args.insert("count".to_owned(), json!(count));
                }
                if let Some(flag) = flag {
                    args.insert("flag".to_owned(), json!(flag));
                }
                if let Some((label, lines)) = nested {
                    args.insert("nested".to_owned(), json!({"label": label, "lines": lines}));
                }
                if let Some(numbers) = numbers {
                    args.insert("numbers".to_owned(), json!(numbers));
                }
                Value::Object(args)
            })
    }

    fn tokens() -> impl Strategy<Value = String> {
        let tokens = [
            "<action>",
            "</action>",
            "<thinking>",
            "</thinking>",
            "<answer>",
            "</answer>",
            "<think>",
            "</think>",
            "<reasoning>",
            "# Action",
            "# Answer",
            "## Tool Calls",
            "# Thinking",
            "\n",
            "\n\n",
            "```",
            "```json",
            "~~~",
            "{",
            "}",
            "[",
            "]",
            ",",
            ":",
            "\"tool\"",
            "\"args\"",
            "\"uid\"",
            "\"name\"",
            "\"arguments\"",
            "\"edit\"",
            "\"text\"",
            "tool: edit",
            "args:",
            "  ",
            "- ",
            "|",
            ">",
            "no",
            "1.10",
            "&a",
            "*a",
            "\"x\"",
            "\t",
            "é",
            "---",
            "===",
        ];
        proptest::collection::vec(proptest::sample::select(tokens.to_vec()), 0..40)
            .prop_map(|parts| parts.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        #[test]
        fn parsers_never_panic(text in prop_oneof![any::<String>(), tokens()]) {
            for p in every_protocol() {
                let parsed = parse(&p, &text, &family());
                let _ = feedback(&p, &parsed.issues);
            }
        }

        #[test]
        fn a_rendered_call_parses_back_to_itself(args in arguments()) {
            for p in every_protocol() {
                let rendered = render_call(&p, "edit", &args);
                let parsed = parse(&p, &rendered, &family());
                prop_assert!(parsed.issues.is_empty(), "{:?}\n{}\n{:#?}", p, rendered, parsed.issues);
                prop_assert_eq!(parsed.calls.len(), 1, "{:?}\n{}", p, rendered);
                prop_assert_eq!(&parsed.calls[0].name, "edit");
                prop_assert_eq!(&parsed.calls[0].input, &args, "{:?}\n{}", p, rendered);
            }
        }
    }
}
