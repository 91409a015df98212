// Package sim implements a simulated SGLang inference worker for tests,
// quick starts and benchmarks of the load balancer. To a router it looks
// like an SGLang engine: /generate, /v1/completions, /v1/chat/completions,
// /health, /health_generate, /server_info, /model_info, /v1/models,
// /v1/loads, /get_load, /metrics and /flush_cache.
//
// # Model
//
// Prompts are tokenized by a pseudo-tokenizer (see Tokenize): ASCII runs are
// cut into CharsPerToken-byte tokens, every non-ASCII rune is one token, and
// /generate input_ids are used as tokens directly. Chat messages are rendered
// with ChatTemplate ("<|role|>content\n" per message, then "<|assistant|>"),
// so a shared system prompt is a real token prefix.
//
// The prefix cache is a token trie with exact longest-prefix matching and LRU
// eviction of leaves, capacity CacheTokens tokens (0 disables it). A request's
// cached_tokens is the length of the longest cached prefix of its prompt at
// the moment its prefill starts; an identical repeated prompt reports
// cached_tokens == prompt_tokens (the simulator does not hold back the last
// token as the real engine does). After a successful prefill the whole prompt
// is in the cache; generated tokens are not cached.
//
// Timing: one prefill at a time per worker taking PrefillPerToken per
// uncached token, then at most MaxBatch requests decode concurrently, each
// taking DecodePerToken per output token (streams are paced per token). With
// all durations zero a request is answered immediately. Output text is a
// deterministic function of the prompt; completion_tokens is always the
// requested maximum (max_new_tokens / max_tokens / max_completion_tokens,
// default 16) and the finish reason is "length".
//
// DPSize only shapes the reports: requests are assigned to ranks round-robin
// for /v1/loads accounting, while the cache and prefill queue are shared.
package sim
