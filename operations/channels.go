package operations

// Reading an operation out of an API response (OPS 4.1). The other
// channels' envelopes are read where they arrive: package api reads an MCP
// tool result's structuredContent, package conversation a message, and
// each hands over an *Operation (Parse), observed by the Client it was
// given (api.OpenAPIOptions.Operations, api.MCPOptions.Operations,
// conversation.Options.Operations). Dependencies point this way: api and
// conversation import operations, never the reverse.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/internal/bounded"
)

// maxBody caps every response body this package reads.
const maxBody = 1 << 20

// FromResponse reads the operation out of an API response (OPS 4.1): a 202
// whose JSON body has "operation". It reads and closes the body of a 202.
// For a status of 400 and above it returns poppy.ResponseError's *Error
// (an extension_required refusal matches poppy.ErrExtensionRequired), body
// left readable; for any other status, ErrNoOperation with the body
// untouched: the Company performed the request as it would without the
// extension (PA-OPS4-01).
func FromResponse(resp *http.Response) (*Operation, error) {
	if resp == nil {
		return nil, ErrNoOperation
	}
	if err := poppy.ResponseError(resp); err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusAccepted {
		return nil, ErrNoOperation
	}
	defer resp.Body.Close()
	b, err := readBody(resp.Body)
	if err != nil {
		return nil, err
	}
	var body struct {
		Operation json.RawMessage `json:"operation"`
	}
	if json.Unmarshal(b, &body) != nil {
		return nil, protocolError("202 body is not a JSON object")
	}
	return Parse(body.Operation)
}

// readBody reads a response body of at most maxBody bytes by the SDK's
// one bounded read (internal/bounded): more is poppy.ErrResponseTooLarge.
func readBody(r io.Reader) ([]byte, error) {
	b, err := bounded.ReadAll(r, maxBody)
	if err != nil && !errors.Is(err, bounded.ErrTooLarge) {
		return nil, fmt.Errorf("operations: reading response: %w", err)
	}
	return b, err
}
