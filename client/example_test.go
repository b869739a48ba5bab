package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/crosscheck/crosscheck/apiv1"
	"github.com/crosscheck/crosscheck/client"
)

// A query is submitted, then followed over its stream to its end.
func ExampleClient_Submit() {
	c, err := client.New(serviceURL, apiKey) // e.g. http://127.0.0.1:8080 and $CROSSCHECK_KEY
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	acc, err := c.Submit(ctx, apiv1.QueryRequest{Mode: "unify", Prompt: "Why is the sky blue?"})
	if err != nil {
		log.Fatal(err)
	}
	q, err := c.Stream(ctx, acc.RequestID, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(q.Status, q.Answer.Text != "")
	// Output: completed true
}

// Stream calls back with each progress event; a dropped connection is
// resumed where it stopped.
func ExampleClient_Stream() {
	c, _ := client.New(serviceURL, apiKey)
	ctx := context.Background()
	acc, err := c.Submit(ctx, apiv1.QueryRequest{Mode: "justify", Prompt: "Is coffee healthy?"})
	if err != nil {
		log.Fatal(err)
	}
	stages := map[string]bool{}
	q, err := c.Stream(ctx, acc.RequestID, func(ev client.Event) {
		if ev.Progress != nil {
			stages[ev.Progress.Stage] = true
		}
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(q.Status, stages["deliberating"], len(q.Justify.Rounds))
	// Output: completed true 2
}

// Wait polls at the spec's cadence: every 5 s for the first minute, then
// every 10 s.
func ExampleClient_Wait() {
	c, _ := client.New(serviceURL, apiKey)
	ctx := context.Background()
	acc, err := c.Submit(ctx, apiv1.QueryRequest{Mode: "verify", Prompt: "Water boils at 100 °C at sea level."})
	if err != nil {
		log.Fatal(err)
	}
	q, err := c.Wait(ctx, acc.RequestID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(q.Status, len(q.Verify.Claims) > 0)
	// Output: completed true
}

// Errors carry the code of the service's error envelope.
func ExampleError() {
	c, _ := client.New(serviceURL, apiKey)
	_, err := c.Submit(context.Background(), apiv1.QueryRequest{Mode: "guess", Prompt: "p"})
	var e *client.Error
	if errors.As(err, &e) {
		fmt.Println(e.Status, e.Code)
	}
	// Output: 400 invalid_mode
}

// Estimate prices a query before it is submitted.
func ExampleClient_Estimate() {
	c, _ := client.New(serviceURL, apiKey)
	est, err := c.Estimate(context.Background(), apiv1.QueryRequest{Mode: "unify", Prompt: "How far is the moon?"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(est.Mode, est.EstimatedCredits > 0, est.Sufficient)
	// Output: unify true true
}

// Models lists the catalog, grouped by provider.
func ExampleClient_Models() {
	c, _ := client.New(serviceURL, apiKey)
	cat, err := c.Models(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(cat.Groups[len(cat.Groups)-1].Name)
	// Output: custom
}
