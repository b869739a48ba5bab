package main

import (
	"context"
	"encoding/json"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/queries"
)

// decodeForTest returns the body hash the service computes for body.
func decodeForTest(h *harness, body any) (string, error) {
	raw, _ := json.Marshal(body)
	req, err := queries.Decode(raw, h.m.Catalog, map[string]bool{events.ModeUnify: true})
	if err != nil {
		return "", err
	}
	return req.Hash(), nil
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

type contextT = context.Context
