package poppytest

// The MCP server's tools (spec 6): a product search and size advice open to
// any Session, and three account tools that need sign-in and scopes
// (mcpTools), among them request_exchange, which proposes an operation.

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Tool inputs and outputs.
type (
	searchIn struct {
		Query      string `json:"query"`
		MaxResults int    `json:"max_results,omitempty"`
	}
	product struct {
		SKU   string `json:"sku"`
		Name  string `json:"name"`
		Price int    `json:"price"`
	}
	searchOut struct {
		Products []product `json:"products"`
	}
	sizeIn struct {
		SKU      string `json:"sku"`
		HeightCM int    `json:"height_cm"`
		ChestCM  int    `json:"chest_cm,omitempty"`
	}
	sizeOut struct {
		Size   string `json:"size"`
		Advice string `json:"advice"`
	}
	ordersOut struct {
		Orders []map[string]any `json:"orders"`
	}
	profileIn struct {
		HeightCM int `json:"height_cm"`
		ChestCM  int `json:"chest_cm,omitempty"`
	}
	profileOut struct {
		Saved   bool   `json:"saved"`
		Account string `json:"account"`
	}
)

var fakeProducts = []product{
	{SKU: "stormline-m", Name: "Stormline Jacket", Price: 120},
	{SKU: "stormline-insulated-m", Name: "Stormline Insulated Jacket", Price: 190},
	{SKU: "trailhead-fleece-m", Name: "Trailhead Fleece", Price: 80},
}

// errSignIn is the account tools' answer to a token that is not signed in
// (mcpScopes answers 403 before the tool runs; this is the tool's own
// check).
var errSignIn = errors.New("sign in first")

// decodeArgs decodes validated arguments into in.
func decodeArgs(raw json.RawMessage, in any) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	return json.Unmarshal(raw, in)
}

func (s *Server) mcpToolDefs() []mcpToolDef {
	heightCM := prop("integer", "the User's height in centimetres")
	chestCM := prop("integer", "the User's chest in centimetres")
	productSchema := objectSchema(map[string]any{"sku": prop("string", ""), "name": prop("string", ""), "price": prop("integer", "")}, "sku", "name", "price")
	return []mcpToolDef{
		{
			name: "search_products", description: "Search the product catalogue by name.",
			input: objectSchema(map[string]any{
				"query":       prop("string", "words to look for in product names"),
				"max_results": prop("integer", "at most this many products, default 10"),
			}, "query"),
			output: objectSchema(map[string]any{"products": map[string]any{"type": "array", "items": productSchema}}, "products"),
			call: func(_ *mcpAuth, raw json.RawMessage) (any, error) {
				var in searchIn
				if err := decodeArgs(raw, &in); err != nil {
					return nil, err
				}
				out := searchOut{Products: []product{}}
				q := strings.ToLower(strings.TrimSpace(in.Query))
				for _, p := range fakeProducts {
					if q == "" || strings.Contains(strings.ToLower(p.Name), q) || strings.Contains(p.SKU, q) {
						out.Products = append(out.Products, p)
					}
					if in.MaxResults > 0 && len(out.Products) >= in.MaxResults {
						break
					}
				}
				return out, nil
			},
		},
		{
			name: "size_advice", description: "Recommend a size of a product for the User's measurements.",
			input: objectSchema(map[string]any{
				"sku":       prop("string", "the product's SKU"),
				"height_cm": heightCM,
				"chest_cm":  chestCM,
			}, "sku", "height_cm"),
			output: objectSchema(map[string]any{"size": prop("string", ""), "advice": prop("string", "")}, "size", "advice"),
			call: func(_ *mcpAuth, raw json.RawMessage) (any, error) {
				var in sizeIn
				if err := decodeArgs(raw, &in); err != nil {
					return nil, err
				}
				if in.HeightCM <= 0 || in.HeightCM > 250 {
					return nil, errors.New("height_cm must be between 1 and 250")
				}
				size := "M"
				switch {
				case in.HeightCM < 165:
					size = "S"
				case in.HeightCM >= 185:
					size = "L"
				}
				return sizeOut{Size: size, Advice: "Size " + size + " fits a height of " + fmt.Sprint(in.HeightCM) + " cm."}, nil
			},
		},
		{
			name: "list_orders", description: "List the signed-in account's orders (needs " + s.signin.read + ").",
			input:  objectSchema(map[string]any{}),
			output: objectSchema(map[string]any{"orders": map[string]any{"type": "array", "items": map[string]any{"type": "object"}}}, "orders"),
			call: func(a *mcpAuth, _ json.RawMessage) (any, error) {
				if a == nil || !a.signedIn {
					return nil, errSignIn
				}
				return ordersOut{Orders: []map[string]any{
					{"id": "ord_7Hk2", "number": "1042", "status": "delivered", "account": a.account},
				}}, nil
			},
		},
		s.exchangeToolDef(),
		{
			name: "save_size_profile", description: "Save the User's measurements on their account (needs " + s.signin.write + ").",
			input:  objectSchema(map[string]any{"height_cm": heightCM, "chest_cm": chestCM}, "height_cm"),
			output: objectSchema(map[string]any{"saved": prop("boolean", ""), "account": prop("string", "")}, "saved", "account"),
			call: func(a *mcpAuth, raw json.RawMessage) (any, error) {
				var in profileIn
				if err := decodeArgs(raw, &in); err != nil {
					return nil, err
				}
				if a == nil || !a.signedIn {
					return nil, errSignIn
				}
				return profileOut{Saved: true, Account: a.account}, nil
			},
		},
	}
}

// exchangeToolDef is request_exchange, the order action that proposes an
// operation (OPS 4.2): the same exchange as POST /orders/{id}/exchanges,
// with the same key, so that one action proposed through either channel is
// one operation (OPS 4). Its result carries the operation in
// structuredContent.operation and the summary as text; nothing is done
// until the operation is confirmed at the operations endpoint. An agent
// that doesn't list the extension gets the exchange done at once, as the
// API does (CO-OPS2-03), or, with Operations.RequireOperations, a tool
// error naming extension_required.
func (s *Server) exchangeToolDef() mcpToolDef {
	return mcpToolDef{
		name: "request_exchange",
		description: "Exchange an item of an order for another product. Proposes an operation the User must approve (needs " +
			s.signin.read + " " + s.signin.write + ").",
		input: objectSchema(map[string]any{
			"order_id":        prop("string", "the order"),
			"item_id":         prop("string", "the item of the order to exchange"),
			"replacement_sku": prop("string", "the SKU to exchange it for"),
		}, "order_id", "item_id", "replacement_sku"),
		checksOwnArgs: true,
		call: func(a *mcpAuth, raw json.RawMessage) (any, error) {
			if a == nil || !a.signedIn {
				return nil, errSignIn
			}
			var in struct {
				OrderID        string `json:"order_id"`
				ItemID         string `json:"item_id"`
				ReplacementSKU string `json:"replacement_sku"`
			}
			if err := decodeArgs(raw, &in); err != nil || in.OrderID == "" || in.ItemID == "" {
				return nil, errors.New("order_id, item_id and replacement_sku are required")
			}
			if _, ok := jackets[in.ReplacementSKU]; !ok {
				return nil, errors.New("unknown replacement_sku")
			}
			summary, terms := exchangeTerms(in.OrderID, in.ItemID, in.ReplacementSKU)
			key := in.OrderID + " " + in.ItemID
			op, err := s.proposeOperation(a.sessionID, operationProposal{Key: key, IDPrefix: "exc_", Summary: summary,
				Terms: terms, Scopes: []string{s.signin.read, s.signin.write}, Perform: exchangePerform})
			switch {
			case errors.Is(err, errNoOperations) && s.opts.Operations.RequireOperations:
				return nil, errors.New("extension_required: exchanges need the operations extension")
			case errors.Is(err, errNoOperations): // CO-OPS2-03
				s.ops.mu.Lock()
				s.ops.actions = append(s.ops.actions, PerformedAction{Key: key, Terms: terms, Time: s.clock.Now()})
				s.ops.mu.Unlock()
				return toolResult{
					"content":           []any{textContent("Exchange requested.")},
					"structuredContent": map[string]any{"exchange_id": newID("exc_", 6), "order_id": in.OrderID, "status": "requested"},
				}, nil
			case err != nil:
				return nil, errors.New("the exchange can't be proposed")
			}
			// OPS 4.2: the operation in structuredContent, the summary as text.
			return toolResult{
				"content":           []any{textContent("Proposed: " + summary + " Not done until confirmed.")},
				"structuredContent": map[string]any{"operation": op},
			}, nil
		},
	}
}
