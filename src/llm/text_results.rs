//! How a text protocol hands tool results back to the model: as text of our next message, in
//! the style of the protocol it answers in (a model asked for XML sections reads results in
//! tags, one asked for Markdown reads them in fences).

use super::ToolProtocol;

/// One result of a call, as the model reads it.
pub fn render_result(
    protocol: ToolProtocol,
    tool: &str,
    id: &str,
    content: &str,
    is_error: bool,
) -> String {
    match protocol {
        ToolProtocol::Xml => {
            let tag = if is_error { "error" } else { "result" };
            format!("<{tag} tool=\"{tool}\" id=\"{id}\">\n{content}\n</{tag}>")
        }
        ToolProtocol::Native | ToolProtocol::Markdown | ToolProtocol::ToolCalls => {
            let what = if is_error { "Error from" } else { "Result of" };
            let fence = crate::markdown::fence_for(content);
            format!("{what} `{tool}` (call {id}):\n{fence}\n{content}\n{fence}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_read_in_the_style_of_the_protocol() {
        assert_eq!(
            render_result(ToolProtocol::Xml, "read_file", "c1", "text", false),
            "<result tool=\"read_file\" id=\"c1\">\ntext\n</result>"
        );
        assert_eq!(
            render_result(ToolProtocol::Xml, "grep", "c2", "bad pattern", true),
            "<error tool=\"grep\" id=\"c2\">\nbad pattern\n</error>"
        );
        assert_eq!(
            render_result(ToolProtocol::Markdown, "read_file", "c1", "text", false),
            "Result of `read_file` (call c1):\n```\ntext\n```"
        );
    }

    #[test]
    fn a_fence_is_never_closed_by_the_content() {
        let content = "before\n````\ninside\n````\nafter";
        let rendered = render_result(ToolProtocol::ToolCalls, "read_file", "c1", content, false);
        assert!(rendered.contains("`````\nbefore"), "{rendered}");
        assert!(rendered.ends_with("after\n`````"), "{rendered}");
    }
}
