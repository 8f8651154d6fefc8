package keyring_test

import (
	"context"
	"log"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/keystore/keyring"
	"github.com/poppyproto/poppy/keystore/sqlitestore"
)

// A desktop agent keeps its secrets in the OS keyring, and falls back to a
// file where there is none (a server, a container, an SSH session without a
// D-Bus session bus).
func Example() {
	ctx := context.Background()
	opts := &poppy.AgentOptions{}
	store, err := keyring.New(nil)
	if err == nil {
		err = store.Ping(ctx)
	}
	if err == nil {
		opts.Store = store
	} else {
		log.Printf("no OS keyring (%v); keeping state in a file", err)
		path, err := sqlitestore.DefaultPath()
		if err != nil {
			log.Fatal(err)
		}
		file, err := sqlitestore.Open(path, nil)
		if err != nil {
			log.Fatal(err)
		}
		defer file.Close()
		opts.Store = file
	}
	// Pass opts to poppy.NewAgent.
	_ = opts
}
