package ui

import (
	"html/template"
	"net/http"
)

// Page serves a page of the program that mounts the dashboard (a page of
// Config.Links) inside the dashboard's layout: its navigation, its style,
// the app's clock named, refreshed live as the dashboard's own pages are.
// body returns the page's content, which it has escaped (html/template);
// an error is shown as the dashboard shows its own.
func (h *Handler) Page(title string, body func(r *http.Request) (template.HTML, error)) http.Handler {
	p := h.page(func(w http.ResponseWriter, r *http.Request) error {
		at := h.cfg.AppNow() // the moment body reads its figures at
		b, err := body(r)
		if err != nil {
			return err
		}
		h.renderLiveAt(w, r, "page", title, "page", b, at)
		return nil
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		secureHeaders(w.Header())
		p.ServeHTTP(w, r)
	})
}
