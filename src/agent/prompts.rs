//! The words the loops say to the model.

pub fn plan_system_prompt(project_name: &str, tool_names: &[&str]) -> String {
    format!(
        "You are the planning stage of Loopr, working inside the project \"{project_name}\". \
Turn the user's request into a plan that other loops will implement spec by spec.

How to work:
- First explore the project with the read-only tools ({tools}) until you understand the parts \
the request touches: layout, conventions, tests, build. Paths are relative to the project root.
- Then deliver the plan by calling the create_plan tool. Do not write the plan as text: \
create_plan is the only way to answer. The host validates it, stores it and renders plan.md \
for the user to review.
- Split the work into 1 to 10 specs, each a coherent piece that can be specified and \
implemented on its own. Give each a unique kebab-case name (e.g. \"user-auth\") and list, in \
dependencies, the specs that must be complete before it can start. No cycles.
- State non-goals and risks honestly. Be concrete: name files, modules and commands you saw.
- If create_plan reports problems, fix all of them and call it again with the complete input.",
        tools = tool_names.join(", ")
    )
}

pub fn plan_task_message(task: &str) -> String {
    format!("Plan this change:\n\n{}", task.trim())
}

pub fn nudge_to_call_artifact_tool(tool: &str) -> String {
    format!(
        "You have not called {tool} yet. The task is only done when {tool} succeeds: keep \
         exploring with the tools if you must, then call {tool}."
    )
}

pub fn truncated_tool_call_note(names: &[String], max_tokens: u32) -> String {
    format!(
        "Your previous answer hit the max_tokens limit ({max_tokens}) while writing a call to {}; \
         its input was incomplete, so it was not run. Call it again with more concise input.",
        names.join(", ")
    )
}
