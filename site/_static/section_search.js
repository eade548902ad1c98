// Sphinx's search lists a section on its own only when the query is a substring of at least half of the
// section's title, so the words a reader types ("join before drain") find the page of chapter 06 but
// not its section "4. Queues: joining before draining, ...". This adds, above the page results, every
// section whose title holds all of the query's words, stemmed as Sphinx stems them (searchtools.js and
// language_data.js define Search, Stemmer, splitQuery and SearchResultKind; this file loads after them).
(() => {
  if (typeof Search === "undefined" || typeof Stemmer === "undefined") return;
  const pageResults = Search._performSearch;
  Search._performSearch = (query, searchTerms, excludedTerms, highlightTerms, objectTerms) => {
    const results = pageResults(query, searchTerms, excludedTerms, highlightTerms, objectTerms);
    const terms = [...searchTerms];
    const index = Search._index;
    if (!terms.length || !index || !index.alltitles) return results;
    const stemmer = new Stemmer();
    const sections = [];
    for (const [title, found] of Object.entries(index.alltitles)) {
      const words = new Set(splitQuery(title.toLowerCase()).map((word) => stemmer.stemWord(word)));
      if (!terms.every((term) => words.has(term)) || [...excludedTerms].some((term) => words.has(term))) continue;
      for (const [file, id] of found) {
        if (id === null || index.titles[file] === title) continue; // a page's own title: already a result
        sections.push([index.docnames[file], `${index.titles[file]} > ${title}`, "#" + id, null,
                       Scorer.title, index.filenames[file], SearchResultKind.title]);
      }
    }
    return [...results, ...sections.reverse()]; // shown from the end: sections first, in page order
  };
})();
