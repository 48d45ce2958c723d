(function(){
  var sel = {run: document.getElementById('f-run'), task: document.getElementById('f-task'),
             status: document.getElementById('f-status')};
  var count = document.getElementById('f-count');
  function apply(){
    var shown = 0, all = document.querySelectorAll('details.attempt');
    for (var i = 0; i < all.length; i++) {
      var d = all[i].dataset;
      var ok = (!sel.run.value || d.run === sel.run.value) && (!sel.task.value || d.task === sel.task.value) &&
               (!sel.status.value || d.status === sel.status.value);
      all[i].style.display = ok ? '' : 'none';
      if (ok) shown++;
    }
    count.textContent = shown + ' of ' + all.length + ' attempts shown';
  }
  for (var k in sel) sel[k].addEventListener('change', apply);
  apply();
})();
