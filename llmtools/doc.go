// Package llmtools hands an LLM tool runtime the Personal Agent as tools:
// the tools of one or more Companies (their OpenAPI operations and MCP
// tools, from package api) plus the agent's own tools, with the User's
// approval of an operation kept outside the model.
//
// A [Toolkit] is one value for the model: [Toolkit.Tools] lists every tool
// with a stable name, a description written for a model and a JSON Schema
// (draft 2020-12) of its input; [Tool.Execute] runs a call and returns
// JSON. The agent's own tools are:
//
//	poppy_discover_company   discover a Company and offer its tools
//	poppy_sign_in            start a sign-in; the User is shown where to go
//	poppy_list_operations    the operations the Companies proposed
//	poppy_get_operation      read one operation
//	poppy_request_approval   ask the User to approve an operation
//	poppy_start_conversation start a conversation with the Company Agent
//	poppy_send_message       send in a conversation
//	poppy_read_conversation  read what is new in a conversation
//
// The conversation tools (package conversation) return the Company's
// messages up to the end of its turn (EventsOptions.UntilIdle), at most 64
// events and 60 s per call; an operation a message carries is observed
// like a tool result's, so it comes back proposed, never approved.
//
// A Company's tools are one per OpenAPI endpoint and MCP tool, built on
// package api (api.OpenAPI.InputSchema, api.MCP.InputSchema); [Tool] is
// the one tool type of the SDK, and [Tool.Domain], [Tool.API] and
// [Tool.Action] say what a Company's tool calls. They are named
// "{company}__{label}_{name}", where company is the domain with every
// character outside [A-Za-z0-9] turned into "_", label the first DNS
// label of the API's host (made unique among the Company's APIs by a
// numeric suffix, in the order of poppy.json) and name the operationId
// (or method and path) or the MCP tool's name, with every character
// outside [A-Za-z0-9_-] turned into "_"; a name over 64 characters is cut
// and ends with 8 hex digits of its SHA-256, and a name already taken gets
// "_2", "_3", …. The same poppy.json and descriptions give the same
// names. The endpoints of the operations extension (confirm, cancel) are
// never tools. A Company tool's result is at most APIOptions.MaxResultBytes
// (64 KiB); a longer one is cut and marked truncated. Every description is at most
// [MaxDescription] bytes; every input schema is a JSON object without
// $ref that compiles as JSON Schema 2020-12 with
// github.com/santhosh-tekuri/jsonschema/v6.
//
// # The model can never approve
//
// Confirming an operation is not a tool (OPS 5.1, PA-OPS5-03). A Company
// tool whose result proposes an operation hands it to the Company's
// operations.Client (the call goes through it, as a message in a
// conversation does: conversation.Options.Operations), and the
// model gets it back marked "PROPOSED, NOT DONE". Calling the tool again
// with the same arguments while that operation is open sends nothing: the
// model gets the open operation, with "error": "operation_pending" (OPS 6,
// PA-OPS6-04). poppy_request_approval
// takes only a domain and an operation ID — no field can carry "the User
// said yes" — and calls operations.Client.Handle, whose approval comes only
// from a standing permission that covers the revision or from the
// runtime's operations.Approver (Options.Approver), the User's own
// interface. Without an Approver the model gets the operation back
// "waiting for the User's approval", and nothing is confirmed. Text of a
// Company (a tool result, an operation's summary) never approves anything:
// only the "operation" member of a result is read.
//
// # Sign-in without blocking the model
//
// poppy_sign_in starts a Device Sign-In (spec 4.6) in the background and
// returns at once: the link and code go to the runtime's
// signin.UserPrompter (Options.Prompter), the User's interface, never to
// the model; the model is told to ask the User to finish the sign-in and
// to call poppy_sign_in again to learn the outcome. [Toolkit.Close] stops
// a sign-in still waiting.
//
// # Secrets
//
// Every result and description is scrubbed of the Session Tokens the
// Sessions hold and of every JWS-shaped string (Account Tokens, DPoP
// proofs), and no tool returns a code, a credential or a token (PA-4.8-08).
// Text is scrubbed before it is cut to a bound, so that a cut never leaves
// part of a secret, and what an earlier cut left of one (the Company's
// error_description is kept to 200 bytes) is scrubbed too: any 8-byte
// stretch of a token, a 4-byte prefix of one before a cut's "…", the
// header and payload of a cut JWS. A model reads a Company's JSON as a
// JSON decoder does, so secrets are looked for in what the decoder reads
// as well as in the bytes: a token written as "\u0051\u006d…", with "\/",
// in a surrogate pair, or in JSON text carried in a JSON string, is found
// and replaced where it stands.
//
// # Adapters
//
// Package github.com/poppyproto/poppy/llmtools/openai, a module of its
// own so that this one never requires openai-go, speaks the OpenAI
// chat-completions tool format (Tools, Run) and runs a bounded tool loop
// against any OpenAI-compatible endpoint (Ask).
// [NewMCPServer] serves the tools to an MCP host (go-sdk), asking the User
// through MCP elicitation: set Options.Elicitation;
// a host without elicitation gets a refusal, never an approval, and with
// Options.ApproveElsewhere the model is told where the User approves it
// themselves (the CLI's "poppy ops confirm DOMAIN ID"). Over MCP,
// leave Options.Prompter nil: poppy_sign_in then tells the model the User
// must sign in in the agent's own interface (the CLI's poppy signin, which
// shares the keystore).
//
// # The MCP host is the User's interface
//
// An approval given through elicitation is as trustworthy as the host's
// UI: the server takes an answer only to an input request it issued, for
// that operation and revision, once. Arguments and Company text never
// count.
package llmtools
