package ui

// UseOf is useOf, for the overview's tests.
var UseOf = useOf
