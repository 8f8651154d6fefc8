// Package openai adapts a [llmtools.Toolkit] to the OpenAI
// chat-completions tool format (github.com/openai/openai-go), and runs a
// bounded tool loop against any OpenAI-compatible endpoint. It is a module
// of its own, so that the root module's users never download openai-go.
//
// The Toolkit's rule holds through the adapter: no tool a model can call
// approves an operation; the User approves in the agent's own interface.
package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"

	"github.com/poppyproto/poppy/internal/companytext"
	"github.com/poppyproto/poppy/llmtools"
)

// Tools returns k's tools in the chat-completions format, for
// ChatCompletionNewParams.Tools.
func Tools(k *llmtools.Toolkit) []openai.ChatCompletionToolUnionParam {
	tools := k.Tools()
	out := make([]openai.ChatCompletionToolUnionParam, 0, len(tools))
	for _, t := range tools {
		var params shared.FunctionParameters
		_ = json.Unmarshal(t.InputSchema, &params)
		out = append(out, openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name: t.Name, Description: openai.String(t.Description), Parameters: params,
		}))
	}
	return out
}

// Run executes with k a tool call of a chat-completions answer and returns
// the tool message that answers it. A call of an unknown tool or of a
// custom tool is answered with an error result. The error is non-nil only
// when ctx ended.
func Run(ctx context.Context, k *llmtools.Toolkit, call openai.ChatCompletionMessageToolCallUnion) (openai.ChatCompletionMessageParamUnion, error) {
	var out json.RawMessage
	var err error
	if call.Type != "" && call.Type != "function" {
		out = json.RawMessage(`{"error":"unknown_tool","message":"only function tools are offered"}`)
	} else {
		out, err = k.Execute(ctx, call.Function.Name, json.RawMessage(call.Function.Arguments))
	}
	if err != nil {
		return openai.ChatCompletionMessageParamUnion{}, err
	}
	return openai.ToolMessage(string(out), call.ID), nil
}

// AskOptions configures Ask.
type AskOptions struct {
	// Model is the model name. Required.
	Model string
	// System is the system message. Empty means a default that explains
	// the approval rule.
	System string
	// MaxSteps bounds the model calls. Zero means 16.
	MaxSteps int
	// OnStep, when set, is called after each model call and each tool call,
	// as it happens.
	OnStep func(Step)
}

// Step is one step of Ask: a model answer or a tool call and its result.
type Step struct {
	N      int             `json:"step"`
	Kind   string          `json:"kind"` // "model" or "tool"
	Text   string          `json:"text,omitempty"`
	Tool   string          `json:"tool,omitempty"`
	Args   json.RawMessage `json:"arguments,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
}

// ErrMaxSteps is returned by Ask when the model is still calling tools
// after AskOptions.MaxSteps model calls.
var ErrMaxSteps = errors.New("llmtools/openai: the model did not finish within the step limit")

const defaultSystem = "You act for the User at Companies through the Personal Agent Protocol tools. " +
	"Discover a Company first with poppy_discover_company. An operation a Company proposes is not done until the User approves it " +
	"in the agent's own interface: ask with poppy_request_approval and report its outcome; never claim an approval yourself."

// Ask runs a tool loop: it sends task to the model with the Toolkit's
// tools, executes the tool calls the model makes, and returns the model's
// final text. The tool list is re-read before each model call, so tools of
// a Company discovered on the way are offered.
func Ask(ctx context.Context, k *llmtools.Toolkit, client openai.Client, task string, opts *AskOptions) (string, error) {
	var o AskOptions
	if opts != nil {
		o = *opts
	}
	if o.Model == "" {
		return "", errors.New("llmtools/openai: Ask needs a model")
	}
	if o.MaxSteps <= 0 {
		o.MaxSteps = 16
	}
	if o.System == "" {
		o.System = defaultSystem
	}
	step := func(s Step) {
		if o.OnStep != nil {
			o.OnStep(s)
		}
	}
	msgs := []openai.ChatCompletionMessageParamUnion{openai.SystemMessage(o.System), openai.UserMessage(task)}
	n := 0
	for range o.MaxSteps {
		resp, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model: shared.ChatModel(o.Model), Messages: msgs, Tools: Tools(k),
		})
		if err != nil {
			return "", fmt.Errorf("llmtools/openai: model: %w", err)
		}
		if len(resp.Choices) == 0 {
			return "", errors.New("llmtools/openai: model: an answer without choices")
		}
		m := resp.Choices[0].Message
		n++
		step(Step{N: n, Kind: "model", Text: companytext.Text(m.Content, 8<<10)})
		if len(m.ToolCalls) == 0 {
			return m.Content, nil
		}
		msgs = append(msgs, m.ToParam())
		for _, call := range m.ToolCalls {
			msg, err := Run(ctx, k, call)
			if err != nil {
				return "", err
			}
			n++
			var res json.RawMessage
			if msg.OfTool != nil {
				res = json.RawMessage(msg.OfTool.Content.OfString.Value)
			}
			args := json.RawMessage(call.Function.Arguments)
			if !json.Valid(args) {
				args = nil
			}
			step(Step{N: n, Kind: "tool", Tool: companytext.Text(call.Function.Name, 64), Args: args, Result: res})
			msgs = append(msgs, msg)
		}
	}
	return "", ErrMaxSteps
}
