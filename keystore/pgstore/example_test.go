package pgstore_test

import (
	"context"
	"encoding/hex"
	"log"
	"os"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/keystore"
	"github.com/poppyproto/poppy/keystore/pgstore"
)

// Every replica of an agent product opens the same database; the first to
// start creates the table. Secret records are sealed with a key from the
// application's secret manager.
func Example() {
	ctx := context.Background()
	// 32 random bytes, hex-encoded. To rotate, put the new key first and
	// keep the old one after it until every record has been written again.
	key, err := hex.DecodeString(os.Getenv("POPPY_KEYSTORE_KEY"))
	if err != nil {
		log.Fatal("POPPY_KEYSTORE_KEY is not hex")
	}
	sealer, err := keystore.NewAESGCMSealer(key)
	if err != nil {
		log.Fatal(err)
	}
	store, err := pgstore.Open(ctx, os.Getenv("DATABASE_URL"), &pgstore.Options{Sealer: sealer})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	opts := &poppy.AgentOptions{Store: store}
	// Pass opts to poppy.NewAgent.
	_ = opts
}
