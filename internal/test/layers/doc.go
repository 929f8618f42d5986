// Package layers holds one test, TestLayers: the import graph of the module, test files
// included, against the picture in ARCHITECTURE.md. A package may import only packages
// drawn in rows below its own; its in-package test files count as the package. An
// external test package (package x_test) is a program of its own and may import anything.
// Every package of the module must be drawn, so a new one is placed on purpose.
package layers
