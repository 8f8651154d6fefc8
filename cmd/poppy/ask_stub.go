//go:build !openai

package main

// poppy ask in a build without the tag "openai" (see cmd_llm.go): the
// command checks its flags and says how to build a poppy that runs it.

import (
	"context"
	"errors"
)

// askBuilt says that this build does not run poppy ask.
const askBuilt = false

// errAskNotBuilt is the answer of poppy ask in this build.
var errAskNotBuilt = errors.New("poppy: this poppy was built without ask: its OpenAI client is compiled only with the build tag openai")

func runAsk(context.Context, *askOptions) error {
	return &hintError{err: errAskNotBuilt, code: exitError, hint: "build it with: " + askInstall}
}
