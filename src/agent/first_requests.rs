//! The first request of each level as the model gets it, natively and in each text protocol:
//! what it costs (the bytes of the body the chat-completions wire sends, and the tokens the
//! budget estimates for them), and that every tool it describes comes with an example call
//! the protocol's parser reads back into a valid call. The size bounds are generous, so that
//! they hold across small wording changes and fail when the tools' schemas or descriptions
//! grow back (a small local model has 2,048 tokens for everything).

use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::artifact_loop::level_tools;
use super::code_loop::{CompletePhaseInput, complete_phase_spec};
use super::context_budget::estimate_text;
use super::prompts;
use super::task_progress::{MarkTasksDoneInput, mark_tasks_done_spec};
use crate::artifacts::{ArtifactKind, PhaseArtifact, PlanArtifact, ReviewInput, SpecArtifact};
use crate::llm::openai::{BodyOptions, TokenLimitField, encode};
use crate::llm::text_protocol::{self, TextProtocol};
use crate::llm::wire_cache::WireCache;
use crate::llm::{
    ChatRequest, ContentBlock, LlmError, LlmProvider, Message, ProviderEvent, StopReason,
    ToolFormat, ToolProtocol, ToolSpec, Turn, with_tool_protocol,
};
use crate::schema::{input_schema_for, judged_differently, schema_issues};
use crate::store::LoopType;
use crate::tools::ToolRegistry;

/// A level's first request as the loop makes it, before any provider sees it.
struct FirstRequest {
    level: &'static str,
    system: String,
    tools: Arc<[ToolSpec]>,
    first: String,
}

fn sample_plan() -> PlanArtifact {
    serde_json::from_value(json!({
        "title": "Add a --version flag to the CLI",
        "overview": "The CLI gets a --version flag that prints the crate's version from \
                     Cargo.toml and exits 0, so users can report what they run.",
        "specs": [{
            "name": "version-flag",
            "title": "Parse and print --version",
            "description": "Add the flag to the argument parser in src/cli.rs and print \
                            env!(\"CARGO_PKG_VERSION\") when it is given."
        }]
    }))
    .expect("a sample plan")
}

fn sample_spec() -> SpecArtifact {
    let phase = |name: &str, title: &str| json!({"name": name, "title": title, "description": format!("{title} in src/cli.rs.")});
    serde_json::from_value(json!({
        "name": "version-flag",
        "title": "Parse and print --version",
        "overview": "Parse --version in src/cli.rs, print the version, exit 0.",
        "phases": [
            phase("parse-flag", "Parse the flag"),
            phase("print-version", "Print the version"),
            phase("test-flag", "Test the flag")
        ]
    }))
    .expect("a sample spec")
}

fn sample_phase() -> PhaseArtifact {
    serde_json::from_value(json!({
        "name": "parse-flag",
        "title": "Parse the flag",
        "objective": "The argument parser accepts --version.",
        "tasks": [{"description": "Add a version flag to Args", "file": "src/cli.rs", "action": "modify"}],
        "validation_command": "cargo test cli"
    }))
    .expect("a sample phase")
}

fn first_requests() -> Vec<FirstRequest> {
    let project = "demo";
    let (plan, spec, phase) = (sample_plan(), sample_spec(), sample_phase());
    let artifact_level = |kind: ArtifactKind, loop_type, reviewed, first| {
        let tools = ToolRegistry::for_loop(loop_type, false);
        FirstRequest {
            level: kind.as_str(),
            system: prompts::system_prompt(kind, project, &tools.names()),
            tools: level_tools(kind, &tools, false, reviewed),
            first,
        }
    };
    let verify_tools = ToolRegistry::for_loop(LoopType::Phase, false);
    let code_tools = ToolRegistry::for_loop(LoopType::Code, false);
    let mut code_specs = code_tools.specs();
    code_specs.push(mark_tasks_done_spec());
    code_specs.push(complete_phase_spec(&phase.validation_command));
    vec![
        // The default settings review plans (five passes) and specs (one judgement).
        artifact_level(
            ArtifactKind::Plan,
            LoopType::Plan,
            true,
            prompts::plan_task_message(&plan.title),
        ),
        artifact_level(
            ArtifactKind::Spec,
            LoopType::Spec,
            true,
            prompts::spec_task_message(&plan, &plan.specs[0]),
        ),
        artifact_level(
            ArtifactKind::Phase,
            LoopType::Phase,
            false,
            prompts::phase_task_message(&spec, 0),
        ),
        FirstRequest {
            level: "code",
            system: prompts::code_system_prompt(project, &code_tools),
            tools: code_specs.into(),
            first: prompts::code_task_message(
                &crate::artifacts::render_phase_markdown(&phase),
                Some(&spec),
                Some(&plan),
            ),
        },
        FirstRequest {
            level: "verify",
            system: super::verification::system_prompt(project, &verify_tools.names(), true),
            tools: super::verification::verifier_tools(&verify_tools, true).into(),
            first: super::verification::sample_first_message(&phase),
        },
    ]
}

/// Keeps the request it is asked, as a provider would send it.
#[derive(Default)]
struct Recorder {
    asked: Mutex<Option<ChatRequest>>,
}

#[async_trait]
impl LlmProvider for Recorder {
    async fn complete(
        &self,
        request: &ChatRequest,
        _on_event: &(dyn Fn(ProviderEvent) + Send + Sync),
        _cancel: &CancellationToken,
    ) -> Result<Turn, LlmError> {
        *self.asked.lock().unwrap_or_else(PoisonError::into_inner) = Some(request.clone());
        Ok(Turn {
            content: vec![ContentBlock::text("Done.")],
            truncated_tool_calls: Vec::new(),
            stop_reason: Some(StopReason::EndTurn),
            usage: Default::default(),
            unreadable: None,
        })
    }
}

/// What one level's first request costs in one protocol.
struct Cost {
    /// The body's bytes.
    body: usize,
    /// The tokens the context budget estimates for the body.
    tokens: u64,
    /// The bytes that describe the tools: the `tools` array, or the protocol's instructions.
    tools: usize,
}

/// The request `level` sends in `protocol` (`None`: native), encoded for chat completions.
async fn cost(level: &FirstRequest, protocol: Option<(ToolProtocol, ToolFormat)>) -> Cost {
    let request = ChatRequest {
        model: "gemma3".to_owned(),
        max_tokens: 1024,
        system: level.system.clone(),
        messages: crate::llm::shared(vec![Message::user_text(level.first.clone())]),
        tools: level.tools.clone(),
    };
    let sent = match protocol {
        None => request,
        Some((protocol, format)) => {
            let recorder = Arc::new(Recorder::default());
            let provider = with_tool_protocol(recorder.clone(), protocol, format);
            provider
                .complete(&request, &|_| {}, &CancellationToken::new())
                .await
                .expect("the recorder answers");
            let asked = recorder.asked.lock().expect("recorder").take();
            asked.expect("a request reached the recorder")
        }
    };
    let options = BodyOptions {
        token_limit: TokenLimitField::MaxTokens,
        tool_choice: None,
        stream: true,
    };
    let body = encode(&sent, &WireCache::default(), options)
        .expect("encodes")
        .to_vec();
    let tools = if sent.tools.is_empty() {
        sent.system.len() - level.system.len()
    } else {
        let body: Value = serde_json::from_slice(&body).expect("json body");
        serde_json::to_string(&body["tools"]).expect("tools").len()
    };
    Cost {
        body: body.len(),
        tokens: estimate_text(&String::from_utf8_lossy(&body)),
        tools,
    }
}

const PROTOCOLS: [(&str, Option<(ToolProtocol, ToolFormat)>); 6] = [
    ("native", None),
    ("xml", Some((ToolProtocol::Xml, ToolFormat::Json))),
    ("xml+yaml", Some((ToolProtocol::Xml, ToolFormat::Yaml))),
    ("markdown", Some((ToolProtocol::Markdown, ToolFormat::Json))),
    (
        "markdown+yaml",
        Some((ToolProtocol::Markdown, ToolFormat::Yaml)),
    ),
    (
        "tool_calls",
        Some((ToolProtocol::ToolCalls, ToolFormat::Json)),
    ),
];

/// Upper bounds of the bytes that describe a level's tools, natively and in the largest text
/// protocol (whose instructions also explain the protocol and show an example call of each
/// tool): about 15 % above what they are, so that growth is noticed. Before the schemas were
/// trimmed, the plan level's tools took 5,921 bytes natively and 6,771 in text.
fn tool_bytes_bound(level: &str, native: bool) -> usize {
    match (level, native) {
        ("plan", true) => 4_700,
        ("plan", false) => 6_400,
        ("spec", true) => 5_000,
        ("spec", false) => 7_100,
        ("phase", true) => 4_250,
        ("phase", false) => 5_650,
        ("code" | "verify", true) => 4_650,
        (_, _) => 6_250,
    }
}

#[tokio::test]
async fn the_first_request_of_every_level_stays_small() {
    let mut table = String::from("level  protocol        body bytes  ~tokens  tool bytes\n");
    let mut too_large = Vec::new();
    for level in first_requests() {
        for (name, protocol) in PROTOCOLS {
            let cost = cost(&level, protocol).await;
            table.push_str(&format!(
                "{:<6} {name:<15} {:>10}  {:>7}  {:>10}\n",
                level.level, cost.body, cost.tokens, cost.tools
            ));
            let bound = tool_bytes_bound(level.level, protocol.is_none());
            if cost.tools > bound {
                too_large.push(format!(
                    "{} {name}: {} bytes of tools, bound {bound}",
                    level.level, cost.tools
                ));
            }
        }
    }
    eprintln!("{table}");
    assert!(too_large.is_empty(), "{too_large:#?}\n{table}");
}

/// The example call the instructions show after `tool`'s listing, as written there.
fn example_after<'a>(instructions: &'a str, tool: &str) -> Option<&'a str> {
    let listed = instructions.find(&format!("\"name\":\"{tool}\""))?;
    let rest = &instructions[listed..];
    let listing_end = rest.find('\n')?;
    let example = rest[listing_end..].strip_prefix("\nExample:\n")?;
    let end = example.find("\n\n{").unwrap_or(example.len());
    Some(example[..end].trim_end())
}

/// `<path>`-like placeholders in the strings of `value`, which a model copies (and which the
/// xml protocol reads as tags).
fn placeholders(value: &Value, found: &mut Vec<String>) {
    match value {
        Value::String(text) => {
            let mut rest = text.as_str();
            while let Some(open) = rest.find('<') {
                let after = &rest[open + 1..];
                match after.find('>') {
                    Some(close) if !after[..close].contains(char::is_whitespace) => {
                        found.push(format!("<{}>", &after[..close]));
                        rest = &after[close..];
                    }
                    _ => rest = after,
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|item| placeholders(item, found)),
        Value::Object(fields) => fields.values().for_each(|field| placeholders(field, found)),
        _ => {}
    }
}

#[test]
fn every_tool_of_every_level_has_a_realistic_example_the_protocol_reads_back() {
    let mut problems = Vec::new();
    for level in first_requests() {
        for (name, protocol) in PROTOCOLS {
            let Some((protocol, format)) = protocol else {
                continue;
            };
            let protocol = TextProtocol::new(protocol, format).expect("a text protocol");
            let instructions = text_protocol::instructions(&protocol, &level.tools);
            for tool in level.tools.iter() {
                let place = format!("{} {name} {}", level.level, tool.name);
                let Some(example) = example_after(&instructions, &tool.name) else {
                    problems.push(format!("{place}: no example"));
                    continue;
                };
                let parsed = text_protocol::parse(&protocol, example, &level.tools);
                if !parsed.issues.is_empty() || parsed.calls.len() != 1 {
                    problems.push(format!("{place}: {example:?} reads as {parsed:?}"));
                    continue;
                }
                let call = &parsed.calls[0];
                if call.name != tool.name {
                    problems.push(format!("{place}: the example calls {}", call.name));
                }
                if tool.example.as_ref() != Some(&call.input) {
                    problems.push(format!(
                        "{place}: {example:?} is not the tool's own example"
                    ));
                }
                let mut found = Vec::new();
                placeholders(&call.input, &mut found);
                if !found.is_empty() {
                    problems.push(format!("{place}: placeholders {found:?} in {example:?}"));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

/// The full schema of a tool a level offers: what the host checks its calls against.
fn full_schema(tool: &str) -> Value {
    let builtin = ToolRegistry::for_loop(LoopType::Code, true);
    match tool {
        "create_plan" => input_schema_for::<PlanArtifact>(),
        "create_spec" => input_schema_for::<SpecArtifact>(),
        "create_phase" => input_schema_for::<PhaseArtifact>(),
        "complete_phase" => input_schema_for::<CompletePhaseInput>(),
        "mark_tasks_done" => input_schema_for::<MarkTasksDoneInput>(),
        "report_verification" => input_schema_for::<crate::artifacts::VerificationReport>(),
        "show_diff" => super::verification::show_diff_schema(),
        review if review.starts_with("review_") => input_schema_for::<ReviewInput>(),
        other => builtin
            .get(other)
            .map(|tool| tool.input_schema())
            .unwrap_or_else(|| panic!("no tool {other}")),
    }
}

#[test]
fn every_example_is_valid_and_the_trimmed_schemas_refuse_what_the_full_ones_refuse() {
    let mut tools: Vec<ToolSpec> = first_requests()
        .iter()
        .flat_map(|level| level.tools.iter().cloned())
        .collect();
    tools.extend(ToolRegistry::for_loop(LoopType::Code, true).specs());
    let mut seen = std::collections::HashSet::new();
    tools.retain(|tool| seen.insert(tool.name.clone()));
    for tool in tools {
        let full = full_schema(&tool.name);
        let example = tool.example.clone().expect("every tool offers an example");
        assert_eq!(schema_issues(&full, &example), Vec::new(), "{}", tool.name);
        assert_eq!(
            judged_differently(&full, &tool.input_schema, &example),
            Vec::<String>::new(),
            "{}",
            tool.name
        );
        let model = crate::schema::CompiledSchema::new(&tool.input_schema)
            .unwrap_or_else(|invalid| panic!("{}: {invalid:?}", tool.name));
        let refused = crate::schema::inputs_near(&example)
            .into_iter()
            .filter(|input| !model.issues(input).is_empty())
            .count();
        assert!(
            refused >= 10,
            "{}: only {refused} inputs refused",
            tool.name
        );
    }
}
