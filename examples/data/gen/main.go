// Command gen writes examples/data/orders-events.jsonl, the synthetic order
// events that the example producer publishes to mmmq.
//
// Every line is one publish request body (contract.PublishRequest): the topic
// name, the content (any JSON value) and the message id (optional in general,
// always set here; the optional headers are not used):
//
//	{"topic":"order.created","content":{"orderId":1001,...},"id":"evt-000001"}
//
// The output is fully deterministic: a fixed PCG seed (math/rand/v2), a fixed
// base time and a fixed number of lines (3000), so running the generator again
// gives a byte-identical file. gen_test.go checks that the committed file is
// exactly what the generator produces; after a change to this program,
// regenerate the file and commit both.
//
// Usage, from the repository root:
//
//	go run ./examples/data/gen                      # rewrites examples/data/orders-events.jsonl
//	go run ./examples/data/gen -o /tmp/events.jsonl # writes somewhere else
//	go run ./examples/data/gen -o -                 # writes to stdout
//
// Each order goes through a plausible sequence, interleaved with the events of
// other open orders:
//
//	order.created → [notification.email "order-received"] → payment.authorized →
//	order.paid → payment.captured → [notification.email "payment-receipt"] →
//	order.shipped → [notification.sms "order-shipped"] → [notification.email "order-shipped"]
//
// (bracketed steps are optional). Every order in the file is complete. All
// values are test values: customers are "cust-0042", e-mail addresses use the
// reserved example.test domain and phone numbers the fictional 555-01xx range.
package main

//go:generate go run . -o ../orders-events.jsonl

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"time"
)

// Generator parameters. Changing any of them changes the committed file.
const (
	// Lines is the exact number of events written.
	Lines = 3000
	// seed1, seed2 seed the PCG source (math/rand/v2).
	seed1, seed2 = 0x6d6d6d71, 0x6f72646572 // "mmmq", "order"
	// maxOpen is how many orders are in flight at the same time.
	maxOpen = 12
	// firstOrderID is the orderId of the first order.
	firstOrderID = 1001
	// customers is the number of distinct test customers (cust-0001 ...).
	customers = 250
)

// base is the timestamp of the first event; later events move forward from it.
var base = time.Date(2024, time.March, 1, 9, 0, 0, 0, time.UTC)

// Topics lists every topic the generator writes, in the order of the order
// life cycle.
var Topics = []string{
	"order.created",
	"order.paid",
	"order.shipped",
	"payment.authorized",
	"payment.captured",
	"notification.email",
	"notification.sms",
}

// Order step kinds. Every order has the five mandatory steps; the optional
// ones are chosen at random when the order is created.
type step int

const (
	stepCreated step = iota
	stepEmailReceived
	stepAuthorized
	stepPaid
	stepCaptured
	stepEmailReceipt
	stepShipped
	stepSMSShipped
	stepEmailShipped
)

// optional lists the steps an order may skip.
var optional = []step{stepEmailReceived, stepEmailReceipt, stepSMSShipped, stepEmailShipped}

const (
	minSteps = 5 // created, authorized, paid, captured, shipped
	maxSteps = minSteps + 4
)

var (
	skus       = []string{"SKU-BOOK-0001", "SKU-MUG-0002", "SKU-TEE-0003", "SKU-CABLE-0004", "SKU-LAMP-0005", "SKU-DESK-0006", "SKU-PEN-0007", "SKU-BAG-0008"}
	unitCents  = []int64{1999, 1250, 2499, 899, 4599, 18900, 350, 3999}
	currencies = []string{"EUR", "EUR", "EUR", "USD", "USD", "GBP", "CHF", "SEK"}
	methods    = []string{"card", "card", "card", "paypal", "bank-transfer"}
	carriers   = []string{"DHL", "UPS", "FedEx", "PostNL", "Royal Mail"}
)

// request is one publish request body (topic, content, id). Field order is
// the output order.
type request struct {
	Topic   string `json:"topic"`
	Content any    `json:"content"`
	ID      string `json:"id"`
}

type orderCreated struct {
	OrderID     int64  `json:"orderId"`
	CustomerID  string `json:"customerId"`
	SKU         string `json:"sku"`
	Quantity    int    `json:"quantity"`
	AmountCents int64  `json:"amountCents"`
	Currency    string `json:"currency"`
	CreatedAt   string `json:"createdAt"`
}

type paymentAuthorized struct {
	PaymentID    string `json:"paymentId"`
	OrderID      int64  `json:"orderId"`
	AmountCents  int64  `json:"amountCents"`
	Currency     string `json:"currency"`
	Method       string `json:"method"`
	AuthorizedAt string `json:"authorizedAt"`
}

type orderPaid struct {
	OrderID     int64  `json:"orderId"`
	PaymentID   string `json:"paymentId"`
	AmountCents int64  `json:"amountCents"`
	Currency    string `json:"currency"`
	PaidAt      string `json:"paidAt"`
}

type paymentCaptured struct {
	PaymentID   string `json:"paymentId"`
	OrderID     int64  `json:"orderId"`
	AmountCents int64  `json:"amountCents"`
	Currency    string `json:"currency"`
	CapturedAt  string `json:"capturedAt"`
}

type orderShipped struct {
	OrderID        int64  `json:"orderId"`
	SKU            string `json:"sku"`
	Quantity       int    `json:"quantity"`
	Carrier        string `json:"carrier"`
	TrackingNumber string `json:"trackingNumber"`
	ShippedAt      string `json:"shippedAt"`
}

type notification struct {
	OrderID    int64  `json:"orderId"`
	CustomerID string `json:"customerId"`
	To         string `json:"to"`
	Template   string `json:"template"`
	SentAt     string `json:"sentAt"`
}

// order is an order in flight: its fixed attributes and the steps still to emit.
type order struct {
	id       int64 // given out by the order.created step
	customer int
	sku      int
	quantity int
	amount   int64
	currency string
	payment  string
	steps    []step
}

// generator holds the random source, the clock and the counters.
type generator struct {
	rng     *rand.Rand
	now     time.Time
	nextID  int64
	nextEvt int
}

// ts formats t with millisecond precision, always the same width.
func ts(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

// newOrder opens the next order with exactly n steps (minSteps <= n <= maxSteps).
func (g *generator) newOrder(n int) *order {
	o := &order{
		customer: 1 + g.rng.IntN(customers),
		sku:      g.rng.IntN(len(skus)),
		quantity: 1 + g.rng.IntN(3),
		currency: currencies[g.rng.IntN(len(currencies))],
	}
	o.amount = unitCents[o.sku] * int64(o.quantity)
	// Keep n-minSteps optional steps, chosen at random, in life-cycle order.
	keep := map[step]bool{}
	for _, i := range g.rng.Perm(len(optional))[:n-minSteps] {
		keep[optional[i]] = true
	}
	for s := stepCreated; s <= stepEmailShipped; s++ {
		if !keep[s] && isOptional(s) {
			continue
		}
		o.steps = append(o.steps, s)
	}
	return o
}

func isOptional(s step) bool {
	for _, o := range optional {
		if o == s {
			return true
		}
	}
	return false
}

// event builds the publish request for step s of order o at the current time.
func (g *generator) event(o *order, s step) request {
	g.nextEvt++
	now := ts(g.now)
	cust := fmt.Sprintf("cust-%04d", o.customer)
	mail := func(tmpl string) notification {
		return notification{OrderID: o.id, CustomerID: cust, To: cust + "@example.test", Template: tmpl, SentAt: now}
	}
	r := request{ID: fmt.Sprintf("evt-%06d", g.nextEvt)}
	switch s {
	case stepCreated:
		// Ids are given out when the order is created, so orderIds (and
		// paymentIds) increase through the file.
		o.id = g.nextID
		o.payment = fmt.Sprintf("pay-%06d", g.nextID-firstOrderID+1)
		g.nextID++
		r.Topic = "order.created"
		r.Content = orderCreated{OrderID: o.id, CustomerID: cust, SKU: skus[o.sku], Quantity: o.quantity,
			AmountCents: o.amount, Currency: o.currency, CreatedAt: now}
	case stepEmailReceived:
		r.Topic, r.Content = "notification.email", mail("order-received")
	case stepAuthorized:
		r.Topic = "payment.authorized"
		r.Content = paymentAuthorized{PaymentID: o.payment, OrderID: o.id, AmountCents: o.amount,
			Currency: o.currency, Method: methods[g.rng.IntN(len(methods))], AuthorizedAt: now}
	case stepPaid:
		r.Topic = "order.paid"
		r.Content = orderPaid{OrderID: o.id, PaymentID: o.payment, AmountCents: o.amount, Currency: o.currency, PaidAt: now}
	case stepCaptured:
		r.Topic = "payment.captured"
		r.Content = paymentCaptured{PaymentID: o.payment, OrderID: o.id, AmountCents: o.amount, Currency: o.currency, CapturedAt: now}
	case stepEmailReceipt:
		r.Topic, r.Content = "notification.email", mail("payment-receipt")
	case stepShipped:
		r.Topic = "order.shipped"
		r.Content = orderShipped{OrderID: o.id, SKU: skus[o.sku], Quantity: o.quantity,
			Carrier:        carriers[g.rng.IntN(len(carriers))],
			TrackingNumber: fmt.Sprintf("TRK%010d", g.rng.Int64N(1e10)), ShippedAt: now}
	case stepSMSShipped:
		r.Topic = "notification.sms"
		r.Content = notification{OrderID: o.id, CustomerID: cust, To: fmt.Sprintf("+1-202-555-%04d", 100+o.customer%100),
			Template: "order-shipped", SentAt: now}
	case stepEmailShipped:
		r.Topic, r.Content = "notification.email", mail("order-shipped")
	default:
		panic(fmt.Sprintf("gen: unknown step %d", s))
	}
	return r
}

// Generate writes exactly Lines publish requests, one JSON object per line.
// The output depends only on the constants above.
func Generate(w io.Writer) error {
	g := &generator{
		rng:    rand.New(rand.NewPCG(seed1, seed2)),
		now:    base,
		nextID: firstOrderID,
	}
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw) // one object per line, '\n' terminated
	enc.SetEscapeHTML(false)

	var open []*order
	pending := 0 // steps still to emit for the open orders
	for written := 0; written < Lines; written++ {
		// Open new orders while there is room; size the last ones so that the
		// file ends exactly at Lines with every order complete.
		for len(open) < maxOpen {
			left := Lines - written - pending
			if left == 0 {
				break
			}
			var n int
			switch {
			case left <= maxSteps:
				n = left // always >= minSteps, see below
			default:
				// Never leave 1..minSteps-1 lines for the next order.
				hi := min(maxSteps, left-minSteps)
				n = minSteps + g.rng.IntN(hi-minSteps+1)
			}
			o := g.newOrder(n)
			open = append(open, o)
			pending += len(o.steps)
		}
		// Emit the next step of a random open order; the clock moves forward
		// by 0.05 .. 3 s per event.
		i := g.rng.IntN(len(open))
		o := open[i]
		g.now = g.now.Add(time.Duration(50+g.rng.IntN(2950)) * time.Millisecond)
		if err := enc.Encode(g.event(o, o.steps[0])); err != nil {
			return err
		}
		o.steps = o.steps[1:]
		pending--
		if len(o.steps) == 0 {
			open = append(open[:i], open[i+1:]...)
		}
	}
	if len(open) != 0 || pending != 0 {
		return fmt.Errorf("gen: %d orders left open", len(open))
	}
	return bw.Flush()
}

func main() {
	out := flag.String("o", "examples/data/orders-events.jsonl", "output file, - for stdout")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: go run ./examples/data/gen [-o file]\n")
		flag.PrintDefaults()
	}
	flag.Parse()

	var buf bytes.Buffer
	if err := Generate(&buf); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var err error
	if *out == "-" {
		_, err = os.Stdout.Write(buf.Bytes())
	} else {
		err = os.WriteFile(*out, buf.Bytes(), 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}
