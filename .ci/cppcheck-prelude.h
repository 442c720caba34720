/*
 * cppcheck-prelude.h -- included by .ci/cppcheck.sh before every file it
 * checks (cppcheck --include); never compiled.
 *
 * PostgreSQL's forboth() advances both cells with comma expressions inside
 * the loop condition, which cppcheck 2.10 does not follow: it reports every
 * lfirst() in the loop body as a possible NULL dereference.  This is the
 * same loop written so that cppcheck sees the NULL tests guard the body.
 * pg_list.h has an include guard, so the definition below is the one the
 * checked file sees.
 */
#include "postgres.h"
#include "nodes/pg_list.h"

#undef forboth
#define forboth(cell1, list1, cell2, list2) \
	for (ForBothState cell1##__state = {(list1), (list2), 0}; \
		 (cell1 = cell1##__state.i < list_length(list1) ? \
		  list_nth_cell(list1, cell1##__state.i) : NULL) != NULL && \
		 (cell2 = cell1##__state.i < list_length(list2) ? \
		  list_nth_cell(list2, cell1##__state.i) : NULL) != NULL; \
		 cell1##__state.i++)
