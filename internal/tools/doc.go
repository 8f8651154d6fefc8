// Package tools holds nothing but this module's tool directives: the
// project's development tools (oapi-codegen, benchstat), kept out of the
// root module's requirements.
package tools
