package testenv

import (
	"errors"

	"github.com/poppyproto/poppy"
)

// Code returns the Code of the Company's *poppy.Error in err's chain, ""
// if there is none: the one way a caller asks which refusal it got,
// wherever the refusal arrived (operations, conversation, a token
// request).
func Code(err error) string {
	var pe *poppy.Error
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}
