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
// becomes too large to ever fit an output-tokens-per-minute limit. A
// maximum the client gives is named as the profile takes it for the model
// ([Profile.CompletionTokensName]): max_completion_tokens on OpenAI, whose
// reasoning models refuse max_tokens, and on Groq; max_tokens on Anthropic.
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
// Memory is bounded whatever the provider sends: a plain answer is read up
// to 64 MiB, a stream's event up to 8 MiB, and the answers a Client reads
// at once up to Config.MaxReadBytes (256 MiB) between them; an answer that
// would pass that bound fails at once with a [*TransportError] naming it.
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
// # What a provider sends
//
// A provider's answers are input, like a client's: a provider, or a proxy
// before it, may echo the key it received, and its text reaches logs,
// terminals, pages, API answers and databases. A Client scrubs everything
// it returns with a [Scrubber] made once from Config.APIKey:
//
//   - the key, in each form it can take (as sent, JSON-escaped with or
//     without "/" escaped, URL query- and path-escaped; a key shorter than
//     6 bytes only after "Bearer "), becomes "[redacted]" in every response
//     header value, every body (a completion's, [RawResponse.Body], a model
//     list's), every stream event ([ChatChunk.Raw] and what is decoded from
//     it) and the text of every error. Nothing else of a completion, a
//     header or an event is changed, so it can be passed on as sent;
//   - an error's Message, Type and Code, and a completion's or a stream
//     chunk's ID and Model, are also cleaned for a person: control
//     characters, terminal escape sequences (CSI, OSC and the other control
//     strings) and bidirectional overrides are dropped, tabs and line breaks
//     become spaces, invalid UTF-8 becomes U+FFFD; and bounded:
//     [MaxMessageBytes] (1 KiB) for a message, [MaxFieldBytes] (128 bytes)
//     for the others, cut at a character boundary with [TruncatedMark]. The
//     key is removed before the cut, so no part of it is left at the edge.
//     An error's param is not kept.
//
// A provider's numbers are bounded too. A usage count is read when it is a
// whole number from 0 to 2^63−1, however JSON writes it (10, 10.0, 1e3); a
// usage with any other count is read as not reported (a nil usage, the
// charge standing as reserved), never as a failed call: the answer arrived,
// and a caller that retried would pay for it again. Each kind of oddity is
// logged through Config.Logger, at most once every governor.NoticeEvery.
//
// The error is classified from the provider's whole text first, so the
// limit, the numbers and the wait it names are read before the text is
// bounded. [Profile.Classify], which has no key, cleans and bounds the same
// way. A server that passes a provider's bytes on (sluice's gateway) puts
// what it writes through the same Scrubber.
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
// Content parts that are not text are priced as the profile set in
// EstimatorConfig.Profile documents it (pass the client's [Client.Profile]):
//
//   - OpenAI, an image_url part: 85 tokens at detail "low"; at "high" or
//     "auto", 85 + 170 per 512-px tile of the image fitted in 2048×2048 and
//     brought down to 768 px on its short side (at most 1,445). GPT-4o mini
//     prices the same tiles at 2,833 + 5,667 each; GPT-4.1 and GPT-5 mini
//     and nano and o4-mini count 32-px patches (at most 1,536) times 1.62,
//     2.46 or 1.72, whatever the detail. A model that is not OpenAI's
//     (another server behind the same wire format) is priced as with no
//     profile.
//   - Anthropic: width×height/750, or a token per 28-px square if more,
//     after the image is fitted within 1,568 px (at most 1,600 tokens), or
//     within 2,576 px (at most 5,000) from Claude Opus 4.7 on.
//   - Groq, which documents no price, and no profile: the most of the
//     formulas above but GPT-4o mini's — 5,000 tokens an image at most.
//
// An image's size is read from the header of a base64 data: URL (PNG,
// JPEG, GIF or WebP; at most 256 KiB of it is decoded); an image given by
// URL, or whose header does not read, is priced at the most an image costs
// at its detail. Audio (input_audio) costs 20 tokens a second, its duration
// read from a WAV header or taken at 8 kbit/s, the lowest MP3 bitrate. A
// PDF (a file part) costs, per page, 3,000 tokens of text and the model's
// largest image; its pages are counted in its bytes and in its Flate
// streams (at most 32 MiB inflated a request); a PDF whose pages cannot be
// counted, or a file sent by file_id, costs 100 pages, the most either
// provider reads. Another file costs its text's tokens, or a token a byte.
// A part of another type costs the largest image. Sums saturate.
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
