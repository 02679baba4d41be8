//! Each server's answer about its context window, read into a `ServerReport`. Pure, so the
//! shapes real servers send are tested as they are; an answer of another shape is `None`.

use serde_json::Value;

use super::ServerReport;

pub const LLAMA_CPP: &str = "GET /props (llama.cpp)";
pub const VLLM: &str = "GET /v1/models (vLLM)";
pub const LM_STUDIO: &str = "GET /api/v0/models (LM Studio)";
pub const OLLAMA: &str = "POST /api/show (Ollama)";

/// A count of tokens as servers write it: a positive integer (a larger one than fits is the
/// largest that does).
fn tokens(value: Option<&Value>) -> Option<u32> {
    value?
        .as_u64()
        .filter(|count| *count > 0)
        .map(|count| u32::try_from(count).unwrap_or(u32::MAX))
}

fn text(value: Option<&Value>) -> Option<String> {
    value?
        .as_str()
        .map(str::trim)
        .filter(|text| !text.is_empty())
        .map(str::to_owned)
}

/// llama.cpp's `GET /props`: the window of one slot (`default_generation_settings.n_ctx`, the
/// server's `-c` divided among its `--parallel` slots), the model its alias or file.
pub fn llama_cpp_props(answer: &Value) -> Option<ServerReport> {
    let window = tokens(answer.pointer("/default_generation_settings/n_ctx"))?;
    let file = text(answer.get("model_path")).map(|path| {
        path.rsplit(['/', '\\'])
            .next()
            .map_or(path.clone(), str::to_owned)
    });
    Some(ServerReport {
        context_window: Some(window),
        model_max: None,
        model: text(answer.get("model_alias")).or(file),
        answered_by: Some(LLAMA_CPP),
    })
}

/// vLLM's `GET /v1/models`: `max_model_len` of the model served as `model` (or of the only
/// model served, which is what vLLM answers with). Other servers list their models without it.
pub fn vllm_models(answer: &Value, model: &str) -> Option<ServerReport> {
    let entry = pick(
        answer,
        model,
        |entry| entry.get("max_model_len").is_some(),
        |_| true,
    )?;
    Some(ServerReport {
        context_window: Some(tokens(entry.get("max_model_len"))?),
        model_max: None,
        model: text(entry.get("id")),
        answered_by: Some(VLLM),
    })
}

/// LM Studio's `GET /api/v0/models`: a loaded model's window (`loaded_context_length`) and the
/// most it can be loaded with (`max_context_length`), for `model` or, when no entry has its
/// name, the one model loaded. A model not loaded yet has no window until LM Studio loads it.
pub fn lm_studio_models(answer: &Value, model: &str) -> Option<ServerReport> {
    let loaded = |entry: &Value| entry.get("state").and_then(Value::as_str) == Some("loaded");
    let entry = pick(
        answer,
        model,
        |entry| entry.get("max_context_length").is_some(),
        loaded,
    )?;
    let report = ServerReport {
        context_window: tokens(entry.get("loaded_context_length")),
        model_max: tokens(entry.get("max_context_length")),
        model: text(entry.get("id")),
        answered_by: Some(LM_STUDIO),
    };
    (report.context_window.is_some() || report.model_max.is_some()).then_some(report)
}

/// The entry of `answer.data` for `model`: the one with its id, else the only one `fallback`
/// accepts; only entries of the server's own shape (`ours`) count.
fn pick<'a>(
    answer: &'a Value,
    model: &str,
    ours: impl Fn(&Value) -> bool,
    fallback: impl Fn(&Value) -> bool,
) -> Option<&'a Value> {
    let entries: Vec<&Value> = answer
        .get("data")?
        .as_array()?
        .iter()
        .filter(|entry| ours(entry))
        .collect();
    if let Some(named) = entries
        .iter()
        .find(|entry| entry.get("id").and_then(Value::as_str) == Some(model))
    {
        return Some(named);
    }
    match entries
        .into_iter()
        .filter(|entry| fallback(entry))
        .collect::<Vec<_>>()
        .as_slice()
    {
        [only] => Some(only),
        _ => None,
    }
}

/// Ollama's `POST /api/show`: the most the model was made for (`model_info`, the key
/// `<architecture>.context_length`) and the window its Modelfile sets (`num_ctx` among the
/// `parameters`), which the server runs it with unless a request sets another. Without a
/// Modelfile window the server uses its own default, which no endpoint tells.
pub fn ollama_show(answer: &Value, model: &str) -> Option<ServerReport> {
    let info = answer.get("model_info").and_then(Value::as_object);
    if info.is_none() && answer.get("parameters").is_none() && answer.get("details").is_none() {
        return None;
    }
    let architecture = info
        .and_then(|info| info.get("general.architecture"))
        .and_then(Value::as_str);
    let model_max = info.and_then(|info| {
        architecture
            .and_then(|architecture| tokens(info.get(&format!("{architecture}.context_length"))))
            .or_else(|| {
                info.iter()
                    .filter(|(key, _)| key.ends_with(".context_length"))
                    .find_map(|(_, value)| tokens(Some(value)))
            })
    });
    let modelfile_window =
        answer
            .get("parameters")
            .and_then(Value::as_str)
            .and_then(|parameters| {
                parameters.lines().find_map(|line| {
                    let mut words = line.split_whitespace();
                    (words.next() == Some("num_ctx"))
                        .then(|| words.next()?.parse::<u64>().ok())
                        .flatten()
                        .filter(|count| *count > 0)
                        .map(|count| u32::try_from(count).unwrap_or(u32::MAX))
                })
            });
    Some(ServerReport {
        context_window: modelfile_window,
        model_max,
        model: Some(model.to_owned()),
        answered_by: Some(OLLAMA),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Trimmed from llama.cpp's server (`llama-server -m gemma-3-1b-it-Q4_K_M.gguf -c 8192
    /// --parallel 2 --jinja`): the slot's window is half of `-c`.
    fn llama_server_props() -> Value {
        json!({
            "default_generation_settings": {
                "id": 0, "id_task": -1, "n_ctx": 4096, "speculative": false,
                "is_processing": false,
                "params": {"n_predict": -1, "temperature": 0.8, "top_k": 40, "top_p": 0.95,
                           "stop": [], "max_tokens": -1, "n_keep": 0, "stream": true},
                "prompt": "", "next_token": {"has_next_token": true, "n_remain": -1}
            },
            "total_slots": 2,
            "model_path": "/models/gemma-3-1b-it-Q4_K_M.gguf",
            "modalities": {"vision": false, "audio": false},
            "chat_template": "{{ bos_token }}{%- for message in messages -%}...{%- endfor -%}",
            "bos_token": "<bos>", "eos_token": "<eos>",
            "build_info": "b5890-c31e6064"
        })
    }

    #[test]
    fn llama_cpp_says_the_window_of_one_slot_and_the_model_file() {
        assert_eq!(
            llama_cpp_props(&llama_server_props()),
            Some(ServerReport {
                context_window: Some(4096),
                model_max: None,
                model: Some("gemma-3-1b-it-Q4_K_M.gguf".to_owned()),
                answered_by: Some(LLAMA_CPP),
            })
        );
        let mut aliased = llama_server_props();
        aliased["model_alias"] = json!("gemma3");
        assert_eq!(
            llama_cpp_props(&aliased).and_then(|report| report.model),
            Some("gemma3".to_owned())
        );
        // vLLM and LM Studio have no `/props`; a proxy's error body is no answer either.
        assert_eq!(llama_cpp_props(&json!({"detail": "Not Found"})), None);
        assert_eq!(
            llama_cpp_props(&json!({"default_generation_settings": {"n_ctx": 0}})),
            None
        );
    }

    /// vLLM 0.9's `/v1/models` (`vllm serve Qwen/Qwen2.5-7B-Instruct --max-model-len 16384
    /// --served-model-name qwen`).
    fn vllm_list() -> Value {
        json!({
            "object": "list",
            "data": [{
                "id": "qwen", "object": "model", "created": 1_749_034_551u64,
                "owned_by": "vllm", "root": "Qwen/Qwen2.5-7B-Instruct", "parent": null,
                "max_model_len": 16384,
                "permission": [{"id": "modelperm-5d4c", "object": "model_permission",
                    "allow_create_engine": false, "allow_sampling": true, "allow_logprobs": true,
                    "allow_view": true, "organization": "*", "is_blocking": false}]
            }]
        })
    }

    #[test]
    fn vllm_says_max_model_len_of_the_served_model() {
        let expected = Some(ServerReport {
            context_window: Some(16384),
            model_max: None,
            model: Some("qwen".to_owned()),
            answered_by: Some(VLLM),
        });
        assert_eq!(vllm_models(&vllm_list(), "qwen"), expected);
        // The only model served is the one meant, whatever name the settings give it.
        assert_eq!(vllm_models(&vllm_list(), "qwen2.5"), expected);
        // llama-cpp-python and llama.cpp list their models without it.
        let llama_cpp_python = json!({"object": "list", "data": [
            {"id": "gemma3", "object": "model", "owned_by": "me", "permissions": []}]});
        assert_eq!(vllm_models(&llama_cpp_python, "gemma3"), None);
    }

    /// LM Studio 0.3's `/api/v0/models`: a model loaded with a smaller window than it can
    /// take, one not loaded, and an embedding model.
    fn lm_studio_list() -> Value {
        json!({
            "object": "list",
            "data": [
                {"id": "qwen2.5-7b-instruct", "object": "model", "type": "llm",
                 "publisher": "lmstudio-community", "arch": "qwen2", "compatibility_type": "gguf",
                 "quantization": "Q4_K_M", "state": "loaded", "max_context_length": 32768,
                 "loaded_context_length": 8192},
                {"id": "meta-llama-3.1-8b-instruct", "object": "model", "type": "llm",
                 "publisher": "lmstudio-community", "arch": "llama", "compatibility_type": "gguf",
                 "quantization": "Q4_K_M", "state": "not-loaded", "max_context_length": 131072},
                {"id": "text-embedding-nomic-embed-text-v1.5", "object": "model",
                 "type": "embeddings", "publisher": "nomic-ai", "arch": "nomic-bert",
                 "compatibility_type": "gguf", "quantization": "Q4_0", "state": "not-loaded",
                 "max_context_length": 2048}
            ]
        })
    }

    #[test]
    fn lm_studio_says_a_loaded_models_window_and_every_models_maximum() {
        assert_eq!(
            lm_studio_models(&lm_studio_list(), "qwen2.5-7b-instruct"),
            Some(ServerReport {
                context_window: Some(8192),
                model_max: Some(32768),
                model: Some("qwen2.5-7b-instruct".to_owned()),
                answered_by: Some(LM_STUDIO),
            })
        );
        assert_eq!(
            lm_studio_models(&lm_studio_list(), "meta-llama-3.1-8b-instruct"),
            Some(ServerReport {
                context_window: None,
                model_max: Some(131072),
                model: Some("meta-llama-3.1-8b-instruct".to_owned()),
                answered_by: Some(LM_STUDIO),
            })
        );
        // A name LM Studio does not list means the model it has loaded.
        assert_eq!(
            lm_studio_models(&lm_studio_list(), "local-model")
                .and_then(|report| report.context_window),
            Some(8192)
        );
        assert_eq!(lm_studio_models(&vllm_list(), "qwen"), None);
    }

    /// Ollama 0.9's `/api/show` for `qwen3:8b` (`model_info` without the tokenizer's arrays,
    /// which only `verbose` sends), once as pulled and once from a Modelfile with a window.
    fn ollama_answer(parameters: &str) -> Value {
        json!({
            "license": "Apache License\nVersion 2.0, January 2004\n...",
            "modelfile": "# Modelfile generated by \"ollama show\"\nFROM /root/.ollama/models/blobs/sha256-a3de86cd1c13\n",
            "parameters": parameters,
            "template": "{{- if .Messages }}...{{- end }}",
            "details": {"parent_model": "", "format": "gguf", "family": "qwen3",
                        "families": ["qwen3"], "parameter_size": "8.2B",
                        "quantization_level": "Q4_K_M"},
            "model_info": {
                "general.architecture": "qwen3",
                "general.basename": "Qwen3",
                "general.file_type": 15,
                "general.parameter_count": 8_190_735_360u64,
                "general.quantization_version": 2,
                "qwen3.attention.head_count": 32,
                "qwen3.block_count": 36,
                "qwen3.context_length": 40960,
                "qwen3.embedding_length": 4096,
                "tokenizer.ggml.model": "gpt2",
                "tokenizer.ggml.tokens": null
            },
            "capabilities": ["completion", "tools", "thinking"],
            "modified_at": "2025-06-01T10:11:12.5Z"
        })
    }

    #[test]
    fn ollama_says_the_models_maximum_and_the_window_its_modelfile_sets() {
        let pulled = ollama_answer(
            "repeat_penalty                 1\nstop                           \"<|im_start|>\"\ntemperature                    0.6",
        );
        assert_eq!(
            ollama_show(&pulled, "qwen3:8b"),
            Some(ServerReport {
                context_window: None,
                model_max: Some(40960),
                model: Some("qwen3:8b".to_owned()),
                answered_by: Some(OLLAMA),
            })
        );
        let windowed = ollama_answer("num_ctx                        16384\ntemperature 0.6");
        assert_eq!(
            ollama_show(&windowed, "qwen3:8b").and_then(|report| report.context_window),
            Some(16384)
        );
        assert_eq!(
            ollama_show(&json!({"error": "model 'x' not found"}), "x"),
            None
        );
    }
}
