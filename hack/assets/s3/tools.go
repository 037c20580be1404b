//go:build tools

// Package tools records the S3-compatible server the storage tests run
// against: SeaweedFS's weed (`weed mini` serves S3 on loopback).
package tools

import _ "github.com/seaweedfs/seaweedfs/weed"
