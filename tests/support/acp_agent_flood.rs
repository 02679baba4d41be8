//! The test agent's `--behave pipe-flood`: an agent that sends Loopr far more than it serves at
//! once, written by hand with blocking writes, so that when Loopr stops reading, the agent
//! stops in its write to the full pipe. A watcher notes `flood-blocked` (with how many
//! updates were written) when the writes make no progress for `STALLED`: a reader that keeps
//! reading never stalls the pipe that long.

use std::io::{BufRead, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// How many session updates the flood sends: many times what Loopr keeps waiting (64) and
/// what a pipe holds.
pub const FLOOD_UPDATES: usize = 20_000;

/// How long writes make no progress before the flood counts as blocked.
const STALLED: Duration = Duration::from_secs(2);

/// Answers `initialize` in protocol version 1, floods (a stall noted), notes
/// `flood-sent`, asks to read `notes.txt` and says what it got; then waits for stdin to end.
pub fn flood() {
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let Some(Ok(first)) = lines.next() else {
        return;
    };
    let id = serde_json::from_str::<serde_json::Value>(&first)
        .ok()
        .and_then(|request| request.get("id").cloned())
        .unwrap_or(serde_json::Value::Null);
    let mut out = std::io::stdout().lock();
    let answer = serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "result": { "protocolVersion": 1, "agentCapabilities": {}, "authMethods": [] },
    });
    send(&mut out, &answer);
    let padding = "x".repeat(200);
    let written = Arc::new(AtomicUsize::new(0));
    watch_for_a_stall(written.clone());
    for number in 0..FLOOD_UPDATES {
        send(&mut out, &update(&format!("update {number} {padding}")));
        written.store(number + 1, Ordering::SeqCst);
    }
    let _ = std::fs::write("flood-sent", FLOOD_UPDATES.to_string());
    let path = std::env::current_dir()
        .unwrap_or_default()
        .join("notes.txt");
    send(
        &mut out,
        &serde_json::json!({
            "jsonrpc": "2.0",
            "id": 2,
            "method": "fs/read_text_file",
            "params": { "sessionId": "flood", "path": path },
        }),
    );
    let said = match lines.next() {
        Some(Ok(line)) => serde_json::from_str::<serde_json::Value>(&line)
            .ok()
            .and_then(|answer| answer["result"]["content"].as_str().map(str::to_owned))
            .unwrap_or_else(|| format!("no content in {line}")),
        _ => "no answer".to_owned(),
    };
    send(&mut out, &update(&format!("answered: {said}")));
    for _ in lines {}
}

/// Notes `flood-blocked`, with the count of updates written, once `written` has not moved for
/// `STALLED` before the whole flood is written.
fn watch_for_a_stall(written: Arc<AtomicUsize>) {
    std::thread::spawn(move || {
        let mut seen = usize::MAX;
        loop {
            std::thread::sleep(STALLED);
            let now = written.load(Ordering::SeqCst);
            if now == FLOOD_UPDATES {
                return;
            }
            if now == seen {
                let _ = std::fs::write("flood-blocked", now.to_string());
                return;
            }
            seen = now;
        }
    });
}

/// A `session/update` notification of the session `flood` with agent text `text`.
fn update(text: &str) -> serde_json::Value {
    serde_json::json!({
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": {
            "sessionId": "flood",
            "update": {
                "sessionUpdate": "agent_message_chunk",
                "content": { "type": "text", "text": text },
            },
        },
    })
}

/// Writes `message` as one line, blocking while the pipe is full.
fn send(out: &mut impl Write, message: &serde_json::Value) {
    if writeln!(out, "{message}")
        .and_then(|()| out.flush())
        .is_err()
    {
        eprintln!("loopr-test-acp-agent: Loopr's end of the pipe is closed");
        std::process::exit(1);
    }
}
