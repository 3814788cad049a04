// Package gateway is an OpenAI-compatible HTTP proxy that puts sluice's
// governor in front of one provider key, so apps in any language share the
// key fairly by pointing their existing client at it.
//
// # Requests
//
// POST /v1/chat/completions is priced (prompt tokens estimated offline,
// output = max_tokens, a flow's default when the request sets none, sent
// under the name the profile takes for the model), then
// waits for admission in its flow's line: X-Sluice-Flow (or the flow of the
// caller's client key) names the flow, unknown flows count as "default".
// A request that can never fit any limit is answered at once with 413 and
// the provider's own "request too large" wording, naming the limit and the
// numbers. A request not admitted within its max wait (Config.MaxWait, or
// X-Sluice-Max-Wait) gets 429 with the governor's estimate of the further
// wait as retry-after, typed after the kind of limit that holds it, and
// keeps its place in line for the same request sent again, within
// Config.MaxFlowParked places per caller and flow. Streams are passed through event by event; the
// gateway asks the provider for usage in the stream, settles the charge with
// it, and drops that chunk when the caller did not ask for it. Any other
// method on a route is answered 405 with Allow, any other URL 404, both in
// the profile's error format.
//
// # Feedback
//
// Rate-limit headers adjust the governor; upstream rate-limit rejections
// hold only the limit they name, and the request waits for admission again
// within its max wait; overload, 5xx, timeouts and resets are retried with
// backoff within the same wait. A caller that disconnects while waiting
// leaves the line and gives its reservation back.
//
// # Routes
//
// Config.Models route model names over several targets, each a provider
// key and model with a governor of its own (routes.go): a routed request
// is priced for each target, package route picks one before admission,
// and the request waits in that target's line only, is sent there with
// the target's model and key, and tells the router how it went. A call is
// never sent to two targets. A flow's budget holds across all of them.
//
// # Secrets
//
// The provider key is sent upstream and nowhere else: errors from upstream
// are re-written from their classified fields (which the llm client has
// scrubbed of the key, cleaned and bounded), never forwarded raw; every
// byte and header the gateway answers passes the key's llm.Scrubber; and
// neither /v1/flows nor /metrics nor the logs carry it.
//
// docs/gateway.md describes the command, the endpoints and the metrics.
package gateway
