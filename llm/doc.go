// Package llm is a client for OpenAI-compatible chat completions APIs that
// knows what each provider's rate-limit headers and error bodies mean. It
// is useful on its own, with any job runner or none: it prices a request
// before it is sent, reads the limits the provider reports, and turns every
// failure into a typed error that says which limit was hit, whether a retry
// can help and after how long.
//
// # Client
//
// [NewClient] takes a [Config] (every field documents its default; the
// zero value works). [Client.Chat] sends a request, [Client.ChatStream]
// streams one over server-sent events with the final usage chunk, and
// [Client.Models] lists models. Every request the client sends carries
// max_tokens: a request without one gets Config.ModelMaxTokens or
// Config.DefaultMaxTokens, and with neither the call fails with
// [ErrNoMaxTokens] before anything is sent. Providers reserve their own
// default output allowance for such a request, which is how a request
// becomes too large to ever fit an output-tokens-per-minute limit.
//
// Every call has deadlines, whatever the http.Client ([Timeouts]): getting
// a connection (Connect, default 10 s), the wait from the request written
// to the first byte of the response (FirstByte, 2 min; for a non-streamed
// completion, the whole generation) and the whole call including the body
// or the stream (Total, 10 min). Config.Timeouts sets them for a client,
// [WithTimeouts] for the calls made with a context; a deadline of the
// context applies too. One that passes fails the call with a
// [*TransportError] of kind Timeout that names it, which is retryable.
//
// The client never retries. Every answer that is not a success is returned
// as one of:
//
//   - [*RateLimitError]: a limit is used up for now (429); retry after
//     RetryAfter. Limit names which one, read from the provider's message.
//   - [*TooLargeError]: the request exceeds a limit's whole allowance and
//     can never succeed as it is, whatever the status code (Groq sends 413,
//     or 429 with a 900 s retry-after for output tokens; OpenAI sends 429).
//   - [*QuotaError]: no money or credit left; never retry.
//   - [*OverloadedError]: the provider's own overload (529, 503); back off.
//   - [*StatusError]: any other status; 5xx (and 408) is retryable, other
//     4xx is not.
//   - [*TransportError]: timeout, reset or malformed body; retryable.
//
// [Retryable], [RetryAfter] and [LimitOf] answer the questions a retry
// policy asks without type switches.
//
// # Governor feedback
//
// [Feedback] turns a governed call's outcome into feedback to its
// governor.Governor: the headers observed, the charge settled with the real
// usage, kept (a 5xx, overload, timeout, reset or malformed body: the
// provider may have counted the call) or given back (a rejection: it did
// not), the limit a 429 names paused, and an allowance an error names
// learnt. sluice's engine, gateway and bench all call it, so the decision
// is made once.
//
// # Profiles
//
// A [Profile] ([Groq], [OpenAI], [Anthropic]) says what the headers mean.
// The same x-ratelimit-*-requests header counts requests per day at Groq
// and per minute at OpenAI; Anthropic reports requests, tokens, input and
// output tokens per minute with absolute reset times. [Profile.Snapshot]
// reads them into a governor.Snapshot; [Profile.Classify] classifies an
// error response without a Client, for code that makes its own HTTP calls.
//
// A profile also writes what it reads, for a server that answers as the
// provider: [Profile.ErrorBody] is its error body, [Profile.RateLimitMessage]
// and [Profile.TooLargeMessage] its wording of a refusal (what Classify
// reads), and [Profile.RateLimitHeaders] the names of its rate-limit headers.
//
// # Cost estimates
//
// An [Estimator] prices a request as a governor.Cost before it is sent:
// one request, input tokens counted with the offline tiktoken vocabularies
// (o200k_base for OpenAI's newer models, cl100k_base otherwise) plus the
// chat format's overhead, scaled by a per-model correction with a margin on
// top, and output tokens = max_tokens. The correction is learned from the
// prompt_tokens providers report ([Estimator.Observe]), so an estimate made
// with one tokenizer still covers a provider that counts with another.
//
// # Forwarding
//
// [DecodeChatRequest] reads a client's raw request body and keeps every
// field it does not model, so a proxy can change what it must (max_tokens)
// and forward the rest unchanged with [ChatRequest.MarshalJSON].
//
// It also bounds what the client sent, where it enters: the body must be
// valid UTF-8 and one JSON object; max_tokens and max_completion_tokens
// from 1 to [MaxOutputTokens]; n from 1 to [MaxChoices]; every message an
// object with a known role and content. Its errors name the field in words
// a proxy can answer with a 400:
//
//	llm: request field "max_tokens": 9223372036854775807 is over the limit of 1048576
//
// A proxy that decodes only part of a body itself checks it with
// [ChatRequest.Validate] (and utf8.Valid on the body). [Estimator.Cost]
// saturates, so even an unchecked request is never priced at a wrapped,
// negative amount.
package llm
