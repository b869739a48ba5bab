package events

import (
	"encoding/json"
	"time"
)

var testTime = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }
