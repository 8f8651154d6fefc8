package operations

// Reading an operation out of the channels that propose one (OPS 4): an
// OpenAPI 202 body, an MCP tool result's structuredContent, a conversation
// message. Each takes a plain value (*http.Response, json.RawMessage or a
// decoded map), so the API and conversation packages can hand operations to
// this one without either importing the other.

import (
	"bytes"
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

// FromToolResult reads the operation out of an MCP tool result's
// structuredContent (OPS 4.2), given as a json.RawMessage, []byte,
// map[string]any or any value that marshals to the object. The result's
// text content is never read: it is for the model, and it never confirms
// anything (PA-OPS4-02).
func FromToolResult(structuredContent any) (*Operation, error) {
	return fromMember(structuredContent, "structuredContent")
}

// FromMessage reads the operation out of a conversation message (OPS 4.3):
// the message object, as a json.RawMessage, []byte or map[string]any. A
// message doesn't confirm an operation whatever its text says: only the
// message's "operation" member is read (PA-OPS5-04).
func FromMessage(message any) (*Operation, error) {
	return fromMember(message, "message")
}

func fromMember(v any, what string) (*Operation, error) {
	var raw []byte
	switch x := v.(type) {
	case nil:
		return nil, ErrNoOperation
	case json.RawMessage:
		raw = x
	case []byte:
		raw = x
	default:
		b, err := json.Marshal(x)
		if err != nil {
			return nil, fmt.Errorf("operations: encoding %s: %w", what, err)
		}
		raw = b
	}
	if len(raw) > maxBody {
		return nil, protocolError("%s too large", what)
	}
	var obj struct {
		Operation json.RawMessage `json:"operation"`
	}
	if json.Unmarshal(bytes.TrimSpace(raw), &obj) != nil {
		return nil, protocolError("%s is not a JSON object", what)
	}
	return Parse(obj.Operation)
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
