// Package docs holds Rampart's documentation pages (the Markdown beside
// this file) and, in links_test.go, the test that every relative link and
// anchor in them, in the README and the chart's, and in the alerts'
// runbook_url resolves.
// It has no code of its own.
package docs
