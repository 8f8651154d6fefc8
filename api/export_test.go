package api

import (
	"context"
	"net/http"
	"net/url"

	"github.com/poppyproto/poppy"
)

// NewOpenAPIFromBytes indexes a description given as bytes, for tests of
// descriptions the fake doesn't serve.
func NewOpenAPIFromBytes(ctx context.Context, sess *poppy.Session, entry poppy.API, body []byte) (*OpenAPI, error) {
	return newOpenAPI(ctx, sess, entry, body, OpenAPIOptions{MaxResponseBytes: defaultMaxBytes})
}

// NewOpenAPIFromBytesWith is NewOpenAPIFromBytes with opts.
func NewOpenAPIFromBytesWith(ctx context.Context, sess *poppy.Session, entry poppy.API, body []byte, opts OpenAPIOptions) (*OpenAPI, error) {
	if opts.MaxResponseBytes == 0 {
		opts.MaxResponseBytes = defaultMaxBytes
	}
	return newOpenAPI(ctx, sess, entry, body, opts)
}

// BearerTransport returns the Bearer transport for the MCP server at mcpURL.
func BearerTransport(sess *poppy.Session, mcpURL string) http.RoundTripper {
	u, _ := url.Parse(mcpURL)
	return newBearerTransport(sess, u, nil)
}

// IndexDescription parses, validates and indexes a description, bypassing
// the parsed-description cache.
func IndexDescription(ctx context.Context, entry poppy.API, body []byte) (int, error) {
	ix, err := index(ctx, entry, body)
	if err != nil {
		return 0, err
	}
	return len(ix.ops), nil
}

// ResetParsedCache empties the parsed-description cache.
func ResetParsedCache() {
	parsedCache.Lock()
	parsedCache.m, parsedCache.bytes = nil, 0
	parsedCache.Unlock()
}

// The errors no caller branches on, named for the tests that match them.
var (
	ErrWrongType               = errWrongType
	ErrUnknownEndpoint         = errUnknownEndpoint
	ErrInvalidResourceMetadata = errInvalidResourceMetadata
	ErrDotSegment              = errDotSegment
	ErrSchemaTooLarge          = errSchemaTooLarge
)
