// Command gendesc writes the OpenAPI description that poppytest's fake
// Company serves to the file named by its argument.
package main

import (
	"fmt"
	"io"
	"net/http"
	"os"

	"github.com/poppyproto/poppy/poppytest"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gendesc FILE")
		os.Exit(2)
	}
	srv, err := poppytest.New(nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer srv.Close()
	resp, err := srv.Client().Get(srv.EndpointURL(poppytest.EndpointAPI) + "/openapi.json")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		fmt.Fprintln(os.Stderr, "gendesc: fetching the description failed:", resp.Status, err)
		os.Exit(1)
	}
	if err := os.WriteFile(os.Args[1], append(b, '\n'), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
